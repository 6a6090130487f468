"""Which source motivated which planner mechanism or preset value, and how to switch it off.

bench/planner/mechanisms.csv lists every mechanism and preset value introduced while the planner was
compared with the published runs (bench/planner/published/README.md describes the columns). For a leave-one-source-out figure,
`Variant.without(source)` gives the flags and preset files that price a row with everything that source motivated
switched off or back at its prior value; `plan_command` in validate.py applies it to a row's command.
Python 3 standard library only.
"""
import csv
import os
import re

KINDS = ("flag", "preset", "kept")
COLUMNS = ["id", "kind", "motivated_by", "introduced", "flag", "on", "off", "presets", "tables", "prior",
           "description"]


class ProvenanceError(Exception):
    pass


def read_mechanisms(path):
    """The rows of mechanisms.csv, checked: known kind, a flag's switch or a preset's prior given."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                raise ProvenanceError(f"{path}: header must be {','.join(COLUMNS)}")
            rows = list(reader)
    except OSError as e:
        raise ProvenanceError(str(e))
    for line, row in enumerate(rows, start=2):
        where = f"{path} line {line} ({row['id'] or 'no id'})"
        if row["kind"] not in KINDS:
            raise ProvenanceError(f"{where}: kind '{row['kind']}' is not one of {', '.join(KINDS)}")
        if row["kind"] == "flag" and not (row["flag"].startswith("--") and row["on"]):
            raise ProvenanceError(f"{where}: a flag mechanism needs flag (--name) and its on value")
        if row["kind"] == "preset" and not (row["presets"] and row["tables"] and prior_values(row)):
            raise ProvenanceError(f"{where}: a preset mechanism needs presets, tables and prior key=value pairs")
        row["sources"] = row["motivated_by"].split()
    return rows


def prior_values(row):
    """`key=value;key=value` -> [(key, value)]; values are TOML as written."""
    pairs = []
    for item in row["prior"].split(";"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ProvenanceError(f"mechanism {row['id']}: prior '{item}' is not key=value")
        pairs.append((key.strip(), value.strip()))
    return pairs


TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*$")


def preset_with_priors(text, tables, priors, label):
    """The preset text with each prior key of the named tables set to its prior value (the line's source says so)."""
    out, table, replaced = [], None, set()
    for line in text.splitlines(keepends=True):
        header = TABLE.match(line)
        if header:
            table = header.group(1).strip()
        key = line.split("=", 1)[0].strip() if "=" in line else None
        prior = dict(priors).get(key) if table in tables else None
        if prior is not None:
            if line.count("{") != line.count("}") or line.count("[") != line.count("]"):
                raise ProvenanceError(f"{label}: [{table}] {key} spans several lines; write it on one to revert it")
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f'{indent}{key} = {{ value = {prior}, source = "prior value ({label})" }}\n')
            replaced.add((table, key))
            continue
        out.append(line)
    missing = [f"[{t}] {k}" for t in tables for k, _ in priors if (t, k) not in replaced]
    if missing:
        raise ProvenanceError(f"{label}: not found in the preset: {', '.join(missing)}")
    return "".join(out)


class Variant:
    """How to price rows with some mechanisms off: flags to switch, preset files to read instead."""

    def __init__(self, flags=(), presets=None, mechanisms=()):
        self.flags = list(flags)          # (flag, on value, off value; '' = drop the flag)
        self.presets = presets or {}      # repository-relative preset -> file with prior values
        self.mechanisms = list(mechanisms)

    @staticmethod
    def without(source, mechanisms, repo, work):
        """Every flag and preset mechanism motivated by `source` off; presets written under `work`."""
        mine = [m for m in mechanisms if source in m["sources"] and m["kind"] in ("flag", "preset")]
        return Variant.off(mine, f"leave-{source}-out", repo, work)

    @staticmethod
    def off(mechanisms, label, repo, work):
        """The given flag and preset mechanisms off; the presets with prior values written under `work`."""
        flags = [(m["flag"], m["on"], m["off"]) for m in mechanisms if m["kind"] == "flag"]
        texts = {}
        for m in (m for m in mechanisms if m["kind"] == "preset"):
            for preset in m["presets"].split():
                if preset not in texts:
                    with open(os.path.join(repo, preset)) as f:
                        texts[preset] = f.read()
                texts[preset] = preset_with_priors(texts[preset], m["tables"].split(), prior_values(m),
                                                   f"{m['id']} off for {label}")
        presets = {}
        for preset, text in texts.items():
            path = os.path.join(work, f"{label}-{os.path.basename(preset)}")
            with open(path, "w") as f:
                f.write(text)
            presets[preset] = path
        return Variant(flags, presets, [m["id"] for m in mechanisms])

    def apply(self, cmd):
        """The command with this variant's flags switched (only where the row has the mechanism's on value)."""
        cmd = list(cmd)
        for flag, on, off in self.flags:
            if flag in cmd:
                i = cmd.index(flag)
                if i + 1 < len(cmd) and cmd[i + 1] == on:
                    cmd[i:i + 2] = [flag, off] if off else []
        return cmd
