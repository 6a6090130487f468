"""strata scan's reader: walks a project (or one file), reads every source it knows, and prints
one JSON document: findings, unreadable files with the reason, rule sets used, and the model the
project builds. Run by `strata scan` (src/scan/scanner_process.cpp), which summarises and judges.

usage: scan_project.py ROOT --rules-dir DIR [--rules FILE]... [--exclude GLOB]... [--max-file-mb N]"""
import argparse
import fnmatch
import json
import os
import sys
import time

try:
    import tomllib
except ImportError:  # Python before 3.11: strata tries the next interpreter, or says what to install
    sys.exit(3)

from model_facts import ModelFacts
from model_mapping import map_model
from native_source import scan_build, scan_native, scan_requirements
from python_source import scan_python
from rules import RuleBook, RuleError, rule_files

FORMAT_VERSION = 1
NATIVE = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".hxx")
ALWAYS_SKIPPED = {".git", ".hg", ".svn", "__pycache__"}


def kind_of(name):
    lowered = name.lower()
    if lowered.endswith((".py", ".pyi")):
        return "python"
    if lowered.endswith(NATIVE):
        return "native"
    if lowered == "cmakelists.txt" or lowered.endswith(".cmake"):
        return "build"
    if (lowered.startswith("requirements") and lowered.endswith(".txt")) or lowered in ("pyproject.toml", "setup.cfg"):
        return "requirements"
    if lowered == "config.json":
        return "model-config"
    return None


def excluded(relative, patterns):
    name = os.path.basename(relative)
    return any(fnmatch.fnmatch(relative, p) or fnmatch.fnmatch(name, p) or fnmatch.fnmatch(relative, p.rstrip("/") + "/*")
               for p in patterns)


def project_files(root, patterns):
    """(relative path, kind) of every file scanned, in a stable order."""
    if os.path.isfile(root):
        return [(os.path.basename(root), kind_of(os.path.basename(root)))]
    found = []
    for directory, subdirectories, files in os.walk(root):
        relative_dir = os.path.relpath(directory, root)
        relative_dir = "" if relative_dir == "." else relative_dir
        subdirectories[:] = sorted(d for d in subdirectories if d not in ALWAYS_SKIPPED
                                   and not excluded(os.path.join(relative_dir, d), patterns))
        for name in sorted(files):
            relative = os.path.join(relative_dir, name)
            kind = kind_of(name)
            if kind and not excluded(relative, patterns):
                found.append((relative, kind))
    return found


class Unreadable(Exception):
    """A file the scan skips; the message says why."""


def unreadable_reason(error):
    if isinstance(error, Unreadable):
        return str(error)
    if isinstance(error, SyntaxError):
        message = f"not valid Python 3: {error.msg} (line {error.lineno})"
        if "Missing parentheses in call to" in error.msg or "must be parenthesized" in error.msg:
            message += "; it looks like Python 2"
        return message
    if isinstance(error, RecursionError):
        return "nested too deeply for Python's parser"
    if isinstance(error, MemoryError):
        return "too large for Python's parser"
    return f"{type(error).__name__}: {error}"


def read_source(path, limit_bytes):
    """The file's bytes, or raises Unreadable saying why it cannot be scanned."""
    size = os.path.getsize(path)
    if size > limit_bytes:
        raise Unreadable(f"{size / 2**20:.1f} MiB, larger than the limit of {limit_bytes / 2**20:.0f} MiB (--max-file-mb)")
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\0" in data:
        raise Unreadable("binary data (NUL bytes), not source text")
    return data


def scan_file(path, relative, kind, rules, facts, limit_bytes):
    data = read_source(path, limit_bytes)
    if kind == "python":
        return scan_python(data, relative, rules, facts), data.count(b"\n")
    text = data.decode("utf-8", errors="replace")
    scanner = {"native": scan_native, "build": scan_build, "requirements": scan_requirements}.get(kind)
    return (scanner(text, relative, rules) if scanner else []), data.count(b"\n")


def scan(root, rules, models, excludes, limit_bytes):
    facts, findings, unreadable, config_files = ModelFacts(), [], [], []
    files = lines = 0
    base = root if os.path.isdir(root) else os.path.dirname(root)
    for relative, kind in project_files(root, excludes):
        if kind == "model-config":
            config_files.append(relative)
            continue
        try:
            found, counted = scan_file(os.path.join(base, relative), relative, kind, rules, facts, limit_bytes)
        except Exception as error:  # any file the scan cannot read is reported, and the scan goes on
            unreadable.append({"file": relative, "reason": unreadable_reason(error)})
            continue
        findings.extend(found)
        files, lines = files + 1, lines + counted
    findings.sort(key=lambda f: (f["file"], f["start_line"], f["end_line"], f["api"]))
    model = map_model(facts, config_files, base, models)
    return {"format_version": FORMAT_VERSION, "root": root, "files_scanned": files, "lines_scanned": lines,
            "rule_sets": rules.sets, "findings": findings, "unreadable": unreadable, "model": model}


def main(arguments):
    started = time.monotonic()
    try:
        rules = RuleBook(rule_files(arguments.rules_dir, arguments.rules))
        with open(os.path.join(arguments.rules_dir, "models.toml"), "rb") as handle:
            models = tomllib.load(handle).get("models", {})
    except (RuleError, OSError, tomllib.TOMLDecodeError) as error:
        print(f"strata scan: {error}", file=sys.stderr)
        return 2
    if not os.path.exists(arguments.root):
        print(f"strata scan: '{arguments.root}' does not exist", file=sys.stderr)
        return 2
    document = scan(arguments.root, rules, models, arguments.exclude, arguments.max_file_mb * 2**20)
    document["seconds"] = round(time.monotonic() - started, 3)
    # File names that are not UTF-8 (held by Python as lone surrogates) are written with '?' in place
    # of the bytes, so the document is always valid UTF-8 JSON.
    sys.stdout.buffer.write(json.dumps(document, ensure_ascii=False).encode("utf-8", "replace"))
    return 0


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--rules-dir", required=True)
    parser.add_argument("--rules", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--max-file-mb", type=float, default=8)
    return parser.parse_args()


if __name__ == "__main__":
    # Long elif chains and generated expressions nest deeply; Python 3.11's own calls do not use the C
    # stack, and the parser checks its depth, so deeper files are reported unreadable, never a crash.
    sys.setrecursionlimit(20000)
    sys.exit(main(parse_arguments()))
