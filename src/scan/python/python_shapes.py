"""Data-dependent control flow in a module's forward(): a branch or loop whose condition reads a
tensor argument's values or shape (`if x.sum() > 0`, `while mask.any()`, `if x.size(1) > n`) breaks
a traced graph or compiles one per shape. Tests only of None-ness, isinstance or a plain flag are
Python decisions, not the data's."""
import ast

BRANCHES = (ast.If, ast.While, ast.IfExp, ast.Assert)
FLAG_TESTS = ("isinstance", "hasattr", "callable")


def _forward(class_node):
    for statement in class_node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == "forward":
            return statement
    return None


def _reads_data(test, tensors):
    """Whether the condition computes something from a tensor argument, not only tests a flag or None."""
    if isinstance(test, ast.Name):
        return False
    ignored = set()  # names used only as flags, None tests or isinstance subjects
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            ignored.update(id(n) for n in (node.left, *node.comparators))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FLAG_TESTS:
            ignored.update(id(n) for n in node.args)
        elif isinstance(node, ast.BoolOp):
            ignored.update(id(n) for n in node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            ignored.add(id(node.operand))
    return any(isinstance(n, ast.Name) and n.id in tensors and id(n) not in ignored for n in ast.walk(test))


def _derived(tensors, function):
    """The arguments and every local assigned from an expression that reads one (`b, t = idx.size()`)."""
    assignments = [n for n in ast.walk(function) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value]
    for node in sorted(assignments, key=lambda n: (n.lineno, n.col_offset)):
        if any(isinstance(n, ast.Name) and n.id in tensors for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            tensors |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return tensors


def forward_control_flow(class_node):
    """The branches of the class's forward() that depend on its tensor arguments, in source order."""
    forward = _forward(class_node)
    if forward is None or not class_node.bases:
        return []
    arguments = forward.args.posonlyargs + forward.args.args + forward.args.kwonlyargs
    tensors = _derived({a.arg for a in arguments[1:]}, forward)  # all but self, and what is computed from them
    found = [node for node in ast.walk(forward) if isinstance(node, BRANCHES) and _reads_data(node.test, tensors)]
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))
