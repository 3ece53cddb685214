"""The examples in the package's docstrings run: the module's, the classes'
and their methods' (native and Python), and the type stubs'. Each runs in a
temporary directory of its own, so a path like "books" is a fresh database.

A block is an indented block after a line ending in "::", a ```python fence,
or doctest lines (">>>")."""

import ast
import doctest
import inspect
import pathlib
import re
import textwrap

import pytest

import actum

STUBS = pathlib.Path(actum.__file__).with_name("__init__.pyi")


def docstrings():
    """(where, docstring) for the module, every class and every method."""
    yield "actum", actum.__doc__ or ""
    for name in sorted(dir(actum)):
        obj = getattr(actum, name)
        if not inspect.isclass(obj) or not obj.__module__.startswith("actum"):
            continue
        yield name, obj.__doc__ or ""
        for attr, member in sorted(vars(obj).items()):
            doc = getattr(member, "__doc__", None)
            if doc and not attr.startswith("__"):
                yield f"{name}.{attr}", doc
    tree = ast.parse(STUBS.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield f"__init__.pyi:{node.name}", doc


def blocks(doc):
    """The code blocks of a docstring: ("python", code) or ("doctest", text)."""
    doc = inspect.cleandoc(doc)
    for fence in re.finditer(r"```python\n(.*?)```", doc, re.S):
        yield "python", textwrap.dedent(fence.group(1))
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith("::") and not line.lstrip().startswith(">>>"):
            body = []
            for following in lines[i + 1 :]:
                if following.strip() and not following.startswith((" ", "\t")):
                    break
                body.append(following)
            code = textwrap.dedent("\n".join(body)).strip()
            if code:
                yield "python", code
    if ">>>" in doc:
        yield "doctest", doc


EXAMPLES = [
    pytest.param(kind, code, id=f"{where}-{n}")
    for where, doc in docstrings()
    for n, (kind, code) in enumerate(blocks(doc))
]


def test_there_are_examples_to_run():
    where = {param.id.rsplit("-", 1)[0] for param in EXAMPLES}
    assert {"actum", "Engine", "Runtime", "Runtime.register_undo"} <= where, where


@pytest.mark.parametrize("kind,code", EXAMPLES)
def test_the_docstring_example_runs(kind, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if kind == "python":
        exec(compile(code, "<docstring example>", "exec"), {"actum": actum})
        return
    test = doctest.DocTestParser().get_doctest(code, vars(actum).copy(), "example", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_the_stubs_cover_every_public_class_and_member():
    tree = ast.parse(STUBS.read_text())
    stubbed = {
        node.name: {
            item.name if isinstance(item, ast.FunctionDef) else item.target.id
            for item in node.body
            if isinstance(item, ast.FunctionDef)
            or (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
        }
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    missing = []
    for name in actum.__all__:
        obj = getattr(actum, name)
        if not inspect.isclass(obj):
            continue
        if name not in stubbed:
            missing.append(name)
            continue
        inherited = dir(BaseException) if issubclass(obj, BaseException) else []
        for member in dir(obj):
            if not member.startswith("_") and member not in inherited:
                if member not in stubbed[name]:
                    missing.append(f"{name}.{member}")
    assert missing == []
