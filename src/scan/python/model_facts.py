"""What the Python pass sees of the model a project builds: from_pretrained names, transformers
config classes, the nn.Module classes (what each constructs and calls), config-like classes and
literal instantiations, module-level constants. model_mapping.py decides from these."""
import ast


def literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def literal_keywords(call):
    values = {}
    for keyword in call.keywords:
        value = literal(keyword.value) if keyword.arg else None
        if value is not None:
            values[keyword.arg] = value
    return values


def _callee_name(scan, function):
    qualified = scan.qualified(function)
    if qualified:
        return qualified
    if isinstance(function, ast.Name):
        return function.id
    return function.attr if isinstance(function, ast.Attribute) else None


class ModelFacts:
    def __init__(self):
        self.pretrained = []      # {name, receiver, file, line}
        self.config_calls = []    # transformers *Config(...): {cls, values, file, line}
        self.instantiations = []  # other calls with literal keywords: {callee, values, file, line}
        self.classes = {}         # (file, name) -> {name, bases, constructs, uses, fields, file, line}
        self.constants = []       # module-level NAME = number: {name, value, file, line}

    def call(self, scan, node, callee):
        function = node.func
        where = {"file": scan.file, "line": node.lineno}
        if isinstance(function, ast.Attribute) and function.attr == "from_pretrained":
            receiver = scan.qualified(function.value) or ast.unparse(function.value)
            argument = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "pretrained_model_name_or_path"), None)
            name = literal(argument) if argument is not None else None
            if isinstance(name, str) and not any(t in receiver for t in ("Tokenizer", "Processor")):
                self.pretrained.append({"name": name, "receiver": receiver, **where})
            return
        if callee and callee.startswith("transformers.") and callee.endswith("Config"):
            self.config_calls.append({"cls": callee.rsplit(".", 1)[-1], "values": literal_keywords(node), **where})
            return
        values = literal_keywords(node)
        if values:
            self.instantiations.append({"callee": (_callee_name(scan, function) or "").rsplit(".", 1)[-1],
                                        "values": values, **where})

    def class_definition(self, scan, node):
        constructs, uses, fields = [], set(), {}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                name = _callee_name(scan, inner.func)
                if name:
                    constructs.append(name)
            elif isinstance(inner, ast.Attribute):
                uses.add(inner.attr)
            elif isinstance(inner, ast.Name):
                uses.add(inner.id)
            elif isinstance(inner, ast.keyword) and inner.arg:
                uses.add(inner.arg)  # is_causal=True
        for statement in node.body:
            target, value = None, None
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
                target, value = statement.target.id, statement.value
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                target, value = statement.targets[0].id, statement.value
            value = literal(value) if value is not None else None
            if target and isinstance(value, (int, float)) and not isinstance(value, bool):
                fields[target] = value
        bases = [scan.qualified(b) or (b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) for b in node.bases]
        self.classes[(scan.file, node.name)] = {"name": node.name, "bases": bases, "constructs": constructs, "uses": uses, "fields": fields,
                                   "file": scan.file, "line": node.lineno}

    def module_constants(self, scan, tree):
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
                value = literal(statement.value)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.constants.append({"name": statement.targets[0].id, "value": value,
                                           "file": scan.file, "line": statement.lineno})
