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


def _token_findings(text, pattern, table, file):
    cleaned = pattern.sub(_blank, text)
    line_starts = [0] + [i + 1 for i, c in enumerate(cleaned) if c == "\n"]
    found, line = [], 0
    for match in IDENTIFIER.finditer(cleaned):
        rule = table.find(match.group(0)) or table.find_prefix(match.group(0))
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
