"""Rule sets: one TOML file per set (src/scan/rules/), loaded, checked and indexed for lookup.

Every rule names what it matches (one of the KIND_FIELDS), a severity, a reason and a tip; the
file gives the category and a version. An error names the file and the rule at fault."""
import os
import tomllib

SEVERITIES = ("blocks", "change", "risk", "info")
# Table name in the file -> the field that says what a rule of it matches.
KIND_FIELDS = {
    "names": "name", "methods": "method", "strings": "string", "keywords": "keyword",
    "native": "token", "build": "token", "files": "extension", "structures": "structure",
}
RULE_FIELDS = {"severity", "reason", "tip", "value", "package"}


class RuleError(Exception):
    pass


class Rule:
    __slots__ = ("kind", "key", "severity", "reason", "tip", "category", "rule_set", "value", "package")

    def __init__(self, kind, key, entry, category, rule_set):
        self.kind, self.key, self.category, self.rule_set = kind, key, category, rule_set
        self.severity, self.reason, self.tip = entry["severity"], entry["reason"], entry["tip"]
        self.value, self.package = entry.get("value"), entry.get("package")


def _check_entry(entry, kind, where):
    field = KIND_FIELDS[kind]
    if not isinstance(entry, dict):
        raise RuleError(f"{where}: a rule must be a table, e.g. {{ {field} = ..., severity = ..., reason = ..., tip = ... }}")
    unknown = set(entry) - RULE_FIELDS - {field}
    if unknown:
        raise RuleError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    for needed in (field, "severity", "reason", "tip"):
        if not isinstance(entry.get(needed), str) or not entry[needed]:
            raise RuleError(f"{where}: '{needed}' must be a non-empty string")
    if entry["severity"] not in SEVERITIES:
        raise RuleError(f"{where}: severity '{entry['severity']}' is not one of {', '.join(SEVERITIES)}")


def load_rule_file(path):
    """The rules of one file, and the set's description."""
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise RuleError(f"rule file '{path}': {error}") from error
    version, category = document.get("version"), document.get("category")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RuleError(f"rule file '{path}': 'version' must be a positive integer")
    if not isinstance(category, str) or not category:
        raise RuleError(f"rule file '{path}': 'category' must be a non-empty string")
    unknown = set(document) - set(KIND_FIELDS) - {"version", "category", "title"}
    if unknown:
        raise RuleError(f"rule file '{path}': unknown key(s) {', '.join(sorted(unknown))}")
    rules = []
    for kind in KIND_FIELDS:
        entries = document.get(kind, [])
        if not isinstance(entries, list):
            raise RuleError(f"rule file '{path}': '{kind}' must be a list of rules")
        for index, entry in enumerate(entries):
            _check_entry(entry, kind, f"rule file '{path}': {kind}[{index}]")
            rules.append(Rule(kind, entry[KIND_FIELDS[kind]], entry, category, name))
    described = {"name": name, "version": version, "category": category,
                 "title": document.get("title", category), "rules": len(rules), "file": os.path.basename(path)}
    return rules, described


class _Table:
    """Exact keys, and keys ending in '*' that match by prefix (the longest prefix wins)."""

    def __init__(self):
        self.exact, self.prefixes = {}, {}

    def add(self, key, rule):
        if key.endswith("*"):
            self.prefixes[key[:-1]] = rule
        else:
            self.exact[key] = rule

    def find_prefix(self, text):
        best = None
        for prefix, candidate in self.prefixes.items():
            if text.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
                best = (prefix, candidate)
        return best[1] if best else None

    def find(self, text):
        rule = self.exact.get(text)
        if rule is not None or not self.prefixes:
            return rule
        return self.find_prefix(text)


class RuleBook:
    """All loaded rules, indexed by what they match."""

    def __init__(self, files):
        self.sets = []
        self.names, self.exact_names, self.name_prefixes = {}, {}, {}
        self.methods, self.strings, self.native, self.build = {}, _Table(), _Table(), _Table()
        self.keywords, self.files, self.structures, self.packages = {}, {}, {}, {}
        for path in files:
            rules, described = load_rule_file(path)
            self.sets.append(described)
            for rule in rules:
                self._add(rule)
        self.module_roots = {name.split(".")[0] for name in list(self.exact_names) + list(self.name_prefixes)}

    def _add(self, rule):
        if rule.kind == "names":
            if rule.key.endswith(".*"):
                self.name_prefixes[rule.key[:-2]] = rule
            else:
                self.exact_names[rule.key] = rule
            if rule.package:
                self.packages[normalise_package(rule.package)] = rule
        elif rule.kind == "keywords":
            self.keywords.setdefault(rule.key, []).append(rule)
        else:
            table = {"methods": self.methods, "files": self.files, "structures": self.structures}.get(rule.kind)
            if table is not None:
                table[rule.key] = rule
            else:
                {"strings": self.strings, "native": self.native, "build": self.build}[rule.kind].add(rule.key, rule)

    def name(self, qualified):
        """The rule for a fully qualified name: an exact rule, else the longest 'prefix.*' rule."""
        rule = self.exact_names.get(qualified)
        if rule is not None:
            return rule
        while qualified:
            rule = self.name_prefixes.get(qualified)
            if rule is not None:
                return rule
            qualified = qualified.rpartition(".")[0]
        return None

    def keyword(self, keyword, value):
        for rule in self.keywords.get(keyword, ()):
            if rule.value == value and type(rule.value) is type(value):
                return rule
        return None

    def structure(self, name):
        rule = self.structures.get(name)
        if rule is None:
            raise RuleError(f"no rule set describes the scanner's structure check '{name}' (add it under 'structures')")
        return rule


def normalise_package(name):
    return name.strip().lower().replace("_", "-").replace(".", "-")


def rule_files(directory, extra):
    """Every *.toml of the directory but models.toml (the model table), then the extra files."""
    found = sorted(os.path.join(directory, f) for f in os.listdir(directory)
                   if f.endswith(".toml") and f != "models.toml")
    return found + list(extra)
