"""Record layouts and readers compiled once from the schema's specs, for the records written
(and rendered) every step.

``RecordSpec.build`` walks each field's key path on every call (about 5 us for a step
record, against 0.5 us for a literal dict). ``layout`` walks them once: it compiles a
function that returns the record as one nested dict literal, so the writer thread pays what a
hand-written dict costs while every key still comes from ``logkit.schema.records``.
``reader`` does the same for reading a record's values back.

    >>> from logkit.schema.records import PERFORMANCE
    >>> perf = layout(PERFORMANCE, "step window_steps avg_step_time_s", window_steps=10)
    >>> perf(step=3, avg_step_time_s=0.5)
    {'step': 3, 'window_steps': 10, 'avg_step_time_s': 0.5}
    >>> perf(step=3, avg_step_time_s=0.5) == PERFORMANCE.build(step=3, window_steps=10, avg_step_time_s=0.5)
    True
"""

from __future__ import annotations

import keyword
from collections.abc import Callable

from logkit.schema.records import COMMON, RecordSpec

# The keys every record starts with, in their order (``step`` where a step applies), as names
# for a layout and as a spec of their own (for what reads any record: the writer, the text logs).
HEADER = " ".join(f.name for f in COMMON)
COMMON_PART = RecordSpec("", None, COMMON)


class _Splice:
    """A free-form mapping spliced into a group at its place (a dict field's content)."""

    __slots__ = ("expr",)

    def __init__(self, expr: str) -> None:
        self.expr = expr


def layout(spec: RecordSpec, names: str, **constants) -> Callable[..., dict]:
    """A compiled builder of ``spec``'s records (or parts of them) with the fields in ``names``.

    ``names``: field names, space-separated, in the order their keys are written. ``**name``
    splices the mapping given for the dict field ``name`` into its group at that place (a
    group holding declared keys and free-form ones: a step's metrics and the other numbers a
    trainer logged). ``constants``: fields whose value is the same in every record built
    (a rank's session id), bound once. The function takes every other field by keyword and
    returns the dict ``spec.build`` would; its ``source`` attribute shows the code.
    """
    tree: dict = {}
    params: list[str] = []
    env: dict = {}
    for token in names.split():
        splice = token.startswith("**")
        name = token[2:] if splice else token
        field = spec[name]  # KeyError: the spec does not declare it
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"{spec.type}: field name {name!r} cannot be a parameter")
        if name in constants:
            expr = f"_c_{name}"
            env[expr] = constants.pop(name)
        else:
            expr = name
            params.append(name)
        if splice:
            if field.type is not dict:
                raise ValueError(f"{spec.type}: only a dict field can be spliced ({name!r} is not)")
            _group(tree, field.raw, spec)[_Splice(expr)] = None
        else:
            node = _group(tree, field.raw[:-1], spec)
            if field.raw[-1] in node:
                raise ValueError(f"{spec.type}: key {'.'.join(field.raw)} laid out twice")
            node[field.raw[-1]] = expr
    if constants:
        raise KeyError(f"{spec.type}: constants for fields not in the layout: {sorted(constants)}")
    signature = f"*, {', '.join(params)}" if params else ""
    return _compile("build", f"def build({signature}):\n    return {_render(tree)}\n", env, f"layout of {spec.type}")


def reader(spec: RecordSpec, names: str) -> Callable[[dict], tuple]:
    """A compiled reader of the fields in ``names`` (space-separated): ``read(record)`` returns
    their values as a tuple, each as ``spec[name].get(record)`` gives it (None where a key or
    group is missing), with each group looked up once: for the records read every step."""
    lines, groups, values = [], {(): "r"}, []
    for name in names.split():
        raw = spec[name].raw
        for depth in range(1, len(raw)):
            if raw[:depth] not in groups:
                var = groups[raw[:depth]] = f"g{len(groups)}"
                lines.append(f"    {var} = {groups[raw[:depth - 1]]}.get({raw[depth - 1]!r})")
                lines.append(f"    if not isinstance({var}, dict):\n        {var} = _EMPTY")
        values.append(f"{groups[raw[:-1]]}.get({raw[-1]!r})")
    source = "def read(r):\n" + "".join(line + "\n" for line in lines) + f"    return ({', '.join(values)},)\n"
    return _compile("read", source, {"_EMPTY": {}}, f"reader of {spec.type}")


def top_key(spec: RecordSpec, name: str) -> str:
    """The key of a field that sits at the top of its record (one a record gets only sometimes)."""
    raw = spec[name].raw
    if len(raw) != 1:
        raise ValueError(f"{spec.type}: {name!r} is nested ({'.'.join(raw)})")
    return raw[0]


def values_of(spec: RecordSpec, record: dict) -> dict:
    """Every field of ``spec`` in ``record``, by name, as written (None where absent)."""
    return {f.name: f.get(record) for f in spec}


def _compile(name: str, source: str, env: dict, what: str) -> Callable:
    """The function ``name`` that ``source`` defines; its ``source`` attribute keeps the code. The
    code is made of field names (identifiers, checked) and keys written with ``repr``: nothing else."""
    exec(compile(source, f"<{what}>", "exec"), env)
    fn = env[name]
    fn.source = source
    return fn


def _group(tree: dict, path: tuple[str, ...], spec: RecordSpec) -> dict:
    node = tree
    for key in path:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"{spec.type}: {key!r} is both a value and a group")
    return node


def _render(node: dict) -> str:
    parts = []
    for key, value in node.items():
        if isinstance(key, _Splice):
            parts.append(f"**{key.expr}")
        elif isinstance(value, dict):
            parts.append(f"{key!r}: {_render(value)}")
        else:
            parts.append(f"{key!r}: {value}")
    return "{" + ", ".join(parts) + "}"
