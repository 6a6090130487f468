"""A Python source's findings, from its syntax tree (ast): imports and their aliases are followed,
so `import torch.cuda as tc; tc.synchronize()` is torch.cuda.synchronize, while "cuda" in a comment
or a docstring is never code. Model facts for model_mapping.py are gathered on the same pass."""
import ast

from findings import finding
from python_shapes import forward_control_flow

DYNAMIC_IMPORTERS = {"importlib.import_module", "__import__"}


class PythonScan(ast.NodeVisitor):
    def __init__(self, rules, file, facts):
        self.rules, self.file, self.facts = rules, file, facts
        self.aliases = {}  # local name -> fully qualified name it was imported as
        self.findings = []

    # --- names -------------------------------------------------------------------------------
    def qualified(self, node):
        """The fully qualified name an expression of names and attributes denotes, or None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        parts.append(self.aliases[node.id])
        return ".".join(reversed(parts))

    def report(self, rule, node, api, **overrides):
        end = getattr(node, "end_lineno", None) or node.lineno
        self.findings.append(finding(rule, self.file, node.lineno, end, api, **overrides))

    def report_name(self, qualified, node):
        rule = self.rules.name(qualified)
        if rule is not None:
            self.report(rule, node, qualified)
        return rule

    # --- imports ------------------------------------------------------------------------------
    def visit_Import(self, node):
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.aliases[root] = root
            self.report_name(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level or not node.module:
            return  # a relative import is the project's own code
        for alias in node.names:
            if alias.name == "*":
                self.report_name(node.module, node)
                continue
            qualified = f"{node.module}.{alias.name}"
            self.aliases[alias.asname or alias.name] = qualified
            self.report_name(qualified, node)

    # --- references ---------------------------------------------------------------------------
    def visit_Name(self, node):
        qualified = self.aliases.get(node.id)
        if qualified is not None and isinstance(node.ctx, ast.Load):
            self.report_name(qualified, node)

    def visit_Attribute(self, node):
        qualified = self.qualified(node)
        if qualified is None:
            self.generic_visit(node)
        else:
            self.report_name(qualified, node)  # the longest name only: not torch.cuda again inside it

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a bare string: not code
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str) and len(node.value) < 64:
            rule = self.rules.strings.find(node.value)
            if rule is not None:
                self.report(rule, node, repr(node.value))

    def visit_JoinedStr(self, node):
        lead = node.values[0] if node.values else None
        if isinstance(lead, ast.Constant) and isinstance(lead.value, str):
            rule = self.rules.strings.find_prefix(lead.value)  # f"cuda:{rank}": its constant lead
            if rule is not None:
                self.report(rule, node, f'f"{lead.value}..."')
        for value in node.values:
            if not isinstance(value, ast.Constant):
                self.visit(value)

    # --- calls --------------------------------------------------------------------------------
    def visit_Call(self, node):
        function = node.func
        callee = self.qualified(function)
        if isinstance(function, ast.Name) and function.id == "getattr" and function.id not in self.aliases:
            unvisited = self.dynamic_getattr(node)
            if unvisited is not None:  # the getattr is the one finding: not its owner module again
                for argument in unvisited:
                    self.visit(argument)
                return
        elif callee in DYNAMIC_IMPORTERS or (isinstance(function, ast.Name) and function.id == "__import__"):
            self.dynamic_import(node)
        elif callee is None and isinstance(function, ast.Attribute):
            rule = self.rules.methods.get(function.attr)
            if rule is not None:
                self.report(rule, node, f".{function.attr}()")
        for keyword in node.keywords:
            if keyword.arg and isinstance(keyword.value, ast.Constant):
                rule = self.rules.keyword(keyword.arg, keyword.value.value)
                if rule is not None:
                    self.report(rule, keyword.value, f"{keyword.arg}={keyword.value.value!r}")
        self.facts.call(self, node, callee)
        self.generic_visit(node)

    def dynamic_getattr(self, node):
        """Reports getattr on a platform module, returning the arguments still to visit; None when it
        is not one (or its constant name reaches no rule)."""
        if len(node.args) < 2:
            return None
        owner = self.qualified(node.args[0])
        if owner is None or owner.split(".")[0] not in self.rules.module_roots:
            return None
        name = node.args[1]
        named = ast.unparse(name)
        shown = f"getattr({ast.unparse(node.args[0])}, {named if len(named) <= 60 else named[:57] + '...'})"
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            reached = self.rules.name(f"{owner}.{name.value}")
            if reached is not None:
                self.report_reached("getattr-resolved", node, shown, f"{owner}.{name.value}", reached)
                return node.args[2:]
            return None
        self.report(self.rules.structure("getattr-computed"), node, shown)
        return node.args[1:]  # the computed name may hold findings of its own

    def dynamic_import(self, node):
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            module = node.args[0].value
            reached = self.rules.name(module)
            if reached is not None:
                self.report_reached("import-resolved", node, f"import_module({module!r})", module, reached)

    def report_reached(self, structure, node, shown, target, reached):
        rule = self.rules.structure(structure)
        self.report(rule, node, shown, tip=f"reaches {target} ({reached.category}): {reached.tip}",
                    reason=f"{rule.reason}: {reached.reason}", severity=reached.severity)

    # --- definitions --------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        # A function a blocking decorator makes a kernel or custom op (@triton.jit): one finding spans
        # it, and its body is the kernel's own code, not more findings.
        kernel = False
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            qualified = self.qualified(target)
            rule = self.rules.name(qualified) if qualified else None
            if rule is not None and rule.severity == "blocks":
                kernel = True
                self.findings.append(finding(rule, self.file, decorator.lineno, node.end_lineno, "@" + qualified))
                if isinstance(decorator, ast.Call):
                    for argument in decorator.args + [k.value for k in decorator.keywords]:
                        self.visit(argument)
            else:
                self.visit(decorator)
        defaults = [d for d in node.args.defaults + node.args.kw_defaults if d is not None]
        for child in defaults if kernel else (node.args, *node.body):
            self.visit(child)
        if node.returns:
            self.visit(node.returns)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.facts.class_definition(self, node)
        rule = self.rules.structure("forward-control-flow")
        for statement in forward_control_flow(node):
            self.report(rule, statement.test, f"{type(statement).__name__.lower()} {ast.unparse(statement.test)[:60]}")
        self.generic_visit(node)


def scan_python(source, file, rules, facts):
    """Findings of one file's source bytes; raises SyntaxError (and friends) for unreadable source."""
    tree = ast.parse(source, filename=file)
    scan = PythonScan(rules, file, facts)
    scan.visit(tree)
    facts.module_constants(scan, tree)
    return scan.findings
