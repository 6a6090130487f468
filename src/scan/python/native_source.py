"""C, C++ and CUDA sources and build files, read for extensions: identifiers outside comments and
string literals are matched against the native and build rules; requirement lists against the
libraries' package names. (Only Python is parsed; these formats are read token by token.)"""
import re

from findings import finding
from rules import normalise_package

IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:::)?")
C_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
HASH_COMMENT_OR_STRING = re.compile(r'#[^\n]*|"(?:\\.|[^"\\])*"', re.S)
REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _blank(match):
    # Keep the line structure: comments and strings become spaces, their newlines stay.
    return re.sub(r"[^\n]", " ", match.group(0))


def _rule_for(token, table):
    """An exact rule, else a prefix rule; a prefix ending in a letter (cublas*) only where the name goes
    on with a capital, as the library's API does (cublasSgemm, cublasHandle_t), not a variable (cublas_handle)."""
    rule = table.exact.get(token)
    if rule is not None:
        return rule
    best = None
    for prefix, candidate in table.prefixes.items():
        if not token.startswith(prefix) or (best is not None and len(prefix) <= len(best[0])):
            continue
        rest = token[len(prefix):]
        if prefix[-1].isalpha() and not (rest[:1].isupper()):
            continue
        best = (prefix, candidate)
    return best[1] if best else None


def _token_findings(text, pattern, table, file):
    cleaned = pattern.sub(_blank, text)
    line_starts = [0] + [i + 1 for i, c in enumerate(cleaned) if c == "\n"]
    found, line = [], 0
    for match in IDENTIFIER.finditer(cleaned):
        rule = _rule_for(match.group(0), table)
        if rule is None:
            continue
        while line + 1 < len(line_starts) and line_starts[line + 1] <= match.start():
            line += 1
        found.append(finding(rule, file, line + 1, line + 1, match.group(0)))
    return found


def scan_native(text, file, rules):
    """A C/C++/CUDA source: the native rules, and the file itself when its extension has a rule."""
    found = []
    for extension, rule in rules.files.items():
        if file.endswith(extension):
            found.append(finding(rule, file, 1, max(1, text.count("\n") + (not text.endswith("\n"))), file))
    return found + _token_findings(text, C_COMMENT_OR_STRING, rules.native, file)


def scan_build(text, file, rules):
    """CMakeLists.txt and *.cmake: the build rules outside comments and quoted strings."""
    return _token_findings(text, HASH_COMMENT_OR_STRING, rules.build, file)


def scan_requirements(text, file, rules):
    """requirements*.txt, pyproject.toml, setup.cfg: a line naming a library package."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.split("#", 1)[0].strip().strip("\"',")
        match = REQUIREMENT_NAME.match(content)
        if match and not content.startswith(("-", "[")):
            rule = rules.packages.get(normalise_package(match.group(1)))
            if rule is not None:
                found.append(finding(rule, file, number, number, f"package {match.group(1)}"))
    return found
