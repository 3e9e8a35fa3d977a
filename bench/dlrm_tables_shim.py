#!/usr/bin/env python3
"""Runs the PyTorch DLRM peer (../shared/peers/dlrm_bench.py) unchanged but for its table sizes.

dlrm_bench.py has no option for its table list (a module constant, TABLES). For the "small tables"
variant of bench/dlrm_train.py this shim reads the script, caps every entry of that one module-level
assignment at ZT_DLRM_MAX_ROWS rows (the syntax tree is changed, not the text: nothing else can be
touched), and runs the result as __main__ with the remaining arguments. The peer's RESULT line
reports the table list it used, which dlrm_train.py checks.

  ZT_DLRM_MAX_ROWS=20000 python3 dlrm_tables_shim.py ../shared/peers/dlrm_bench.py --emb sparse ...
"""
import ast
import os
import sys


def capped_module(source, filename, max_rows):
    """The script's syntax tree with its top-level `TABLES = [...]` capped at max_rows per table;
    raises ValueError where there is no such assignment."""
    tree = ast.parse(source, filename)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "TABLES"):
            rows = ast.literal_eval(node.value)
            node.value = ast.copy_location(
                ast.List(elts=[ast.Constant(min(int(n), max_rows)) for n in rows],
                         ctx=ast.Load()), node.value)
            return ast.fix_missing_locations(tree)
    raise ValueError(f"{filename}: no top-level `TABLES = [...]` to cap")


def main():
    script = os.path.abspath(sys.argv[1])
    max_rows = int(os.environ["ZT_DLRM_MAX_ROWS"])
    with open(script) as f:
        tree = capped_module(f.read(), script, max_rows)
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(script))
    code = compile(tree, script, "exec")
    exec(code, {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__})


if __name__ == "__main__":
    main()
