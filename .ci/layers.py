#!/usr/bin/env python3
"""Checks the engine's layering: which parts of `engine/src/` may name which.

Two crates: the engine (`engine/src/`, the crate `placelab`) and the front end over it (`src/`,
`--crate frontend`). The front end can name the engine and never the other way round (cargo sees
to that: the engine does not depend on it); inside the front end, only the file rule below holds.

Units: each folder of `engine/src/` is a layer's unit (LAYERS below: `device/`, `backend/`, …), and
every `.rs` file belongs to one; a file may name its own unit, units on strictly lower layers,
and `root` (lib.rs). Two units on one layer may not name each other unless ALLOWED_PAIRS says
so. The unit graph must have no cycle besides those pairs, and the files under a folder of
FORBIDDEN_NAMES must not use the identifiers listed for it in code. Inside a unit, the order is
the file graph's (below): no file may reach itself.

A reference is any path into the crate, outside comments and strings: `use` trees (nested braces
included), `crate::`/`$crate::`/`placelab::` paths in code and macros, `self::`/`super::` (resolved
against the module, inline `mod x { }` blocks included), and `child::` paths/`use child::X` for a
`mod child;` the file declares (`mod child;` itself is not a reference). Re-exports (`pub use`)
and `#[macro_export]` macros are followed to the file that defines the name.

Files, all of `src/` (the front end and lib.rs included): no file may reach itself through the
files it names. File A has an edge to file B when A names something B defines (A != B; the name
followed through re-exports to its file). A `pub use` item declares a name and is no edge unless
the file's own code names what it binds; `mod child;` is no edge. Each set of files on a cycle is
an error, printed with one reference (file:line) per edge in it, unless ALLOWED_FILE_CYCLES lists
exactly that set with the reason. The usual fix: a child names `super::X` while mod.rs calls the
child; move X, or the call, into a file of its own so that the two depend one way.

To edit the table: each row is (layer, unit, patterns); a pattern is a path relative to `src/`
(`device/mod.rs`) or a directory prefix ending in `/` (`backend/`); the longest matching pattern
wins. A file no pattern matches is an error; a pattern that matches nothing is a warning.

Usage: python3 .ci/layers.py [--crate engine|frontend] [--src DIR] [--graph | --dot | --files]
       (from the repository root)
  --graph: each unit's edges and the files behind them; --dot: the unit graph for Graphviz;
  --files: each file's edges, each with the line of one reference.
"""
import argparse, bisect, os, re, sys

LAYERS = [
    # 0. leaves (units, the cache folder, dtypes, the op enums), then what named GPUs would take:
    #    a table and a model (names dtypes only)
    (0, "root", ["lib.rs"]),
    (0, "base", ["base/"]),
    (1, "cost", ["cost/"]),
    # 1. devices: the Device value and its kind, errors, layouts, the interrupt flag, the registry
    (2, "device", ["device/"]),
    # 2. backends: pointers, slices and layouts; beside them, the profiler's records
    (3, "backend", ["backend/"]),
    (3, "profile", ["profile/"]),
    # 3.-5. memory, storage, transfers
    (4, "memory", ["memory/"]),
    (5, "storage", ["storage/"]),
    (6, "transfer", ["transfer/"]),
    # 6. tensors with their autograd
    (7, "tensor", ["tensor/"]),
    # 7. built from tensors
    (8, "train", ["train/"]),
    # 8. everything the engine draws, the torch.cuda facade, then what runs in a cell's process
    (9, "display", ["display/"]),
    (10, "cuda", ["cuda/"]),
    (11, "cell", ["cell/"]),
]
# The front end's crate: one unit over its root; only the file rule applies inside it.
FRONTEND_LAYERS = [(0, "root", ["lib.rs"]), (1, "frontend", ["*"])]
ROOT = "root"  # lib.rs: exempt from the rule (it declares and re-exports everything)
ALLOWED_PAIRS = set()  # units that may name each other (same layer, either way): none now
FORBIDDEN_NAMES = {  # folder -> identifiers its code must not use
    "backend/gpu/": ["Storage", "Block", "InFlight", "Tensor"],
    "backend/cpu/": ["Storage", "Block", "InFlight", "Tensor"],
    # The storage layer alone picks a backend: the tensor layer calls its ops, never a
    # backend's kernel or the bytes a kernel reads.
    "tensor/": ["gpu", "device_ptr", "slice", "slice_mut", "backend"],
    # Training calls tensor operations only.
    "train/": ["Storage", "UpdateSlot", "Block"],
}
FORBIDDEN_LABEL = {"backend/gpu/": "the CUDA backend", "backend/cpu/": "the CPU backend",
                   "tensor/": "the tensor layer", "train/": "training"}
FORBIDDEN_WHY = {
    "backend/gpu/": "backends work on pointers, slices and layouts",
    "backend/cpu/": "backends work on pointers, slices and layouts",
    "tensor/": "only storage/ picks a backend and touches the bytes (a storage op that returns a Storage)",
    "train/": "call a tensor operation (tensor/), which calls storage",
}
# Cycles between files that are by design, each with why: a cycle between files must be one of
# these sets exactly (paths relative to src/), so a file that joins it is an error.
ALLOWED_FILE_CYCLES = {
    frozenset({"tensor/mod.rs", "tensor/autograd/mod.rs"}):
        "one recursive type: a Tensor holds its GradMeta (its node, its .grad), which holds Tensors",
}
MAX_REEXPORT_DEPTH = 5

IDENT = r"\$?[A-Za-z_]\w*"
RAW_STR = re.compile(r'(?<!\w)[bc]?r(#*)"')
PATH = re.compile(r"(?<![\w:$])(%s)((?:\s*::\s*[A-Za-z_]\w*)+)(\s*!(?!=))?" % IDENT)
USE = re.compile(r"\buse\s+([^;]*);")
TOKEN = re.compile(r"::|[{},*]|%s" % IDENT)
INLINE_MOD = re.compile(r"\bmod\s+([A-Za-z_]\w*)\s*\{")
DECLARES = re.compile(r"\b(?:fn|let|mut|struct|enum|union|trait|type|const|static|mod)\s+\Z")
VIS_IN = re.compile(r"\bpub\s*\(\s*in\s[^()]*\)")  # `pub(in crate::cpu)`: a visibility, no reference
PUB_BEFORE = re.compile(r"\bpub\s*(?:\([^()]*\)\s*)?\Z")
CHILD_MOD = re.compile(r"\bmod\s+([A-Za-z_]\w*)\s*;")
DEFINES = re.compile(r"\b(?:fn|struct|enum|mod|const|static|type|trait|union|macro_rules!)\s+([A-Za-z_]\w*)")
MACRO_EXPORT = re.compile(r"#\[macro_export\]\s*(?:#\[[^\]]*\]\s*)*macro_rules!\s*([A-Za-z_]\w*)")
ABSOLUTE = ("crate", "$crate", "placelab")


def strip(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        raw = RAW_STR.match(text, i) if text[i] in "bcr" else None
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):  # block comments nest in Rust
            depth, j = 1, i + 2
            while j < n and depth:
                step = text[j:j + 2]
                depth += (step == "/*") - (step == "*/")
                j += 2 if step in ("/*", "*/") else 1
        elif raw:
            end = text.find('"' + raw.group(1), raw.end())
            j = n if end < 0 else end + 1 + len(raw.group(1))
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
        elif text[i] == "'" and i + 2 < n and (text[i + 1] == "\\" or text[i + 2] == "'"):
            j = text.find("'", i + 3 if text[i + 1] == "\\" else i + 2) + 1 or n
        else:  # code, or a lifetime
            i += 1
            continue
        out[i:j] = re.sub(r"[^\n]", " ", text[i:j])
        i = j
    return "".join(out)


def module_of(rel):
    parts = rel[:-3].split("/")
    return [] if rel in ("lib.rs", "main.rs") else parts[:-1] if parts[-1] == "mod" else parts


def parse_use(toks, k, prefix, out):
    """Parses one use tree at toks[k]; appends (segments, bound name, offset) per leaf."""
    segs = list(prefix)
    if toks[k][0] == "::":
        k += 1
    while True:
        t, pos = toks[k]
        if t == "{":
            k += 1
            while toks[k][0] != "}":
                k = parse_use(toks, k, segs, out)
                k += toks[k][0] == ","
            return k + 1
        if t == "*":
            out.append((segs, "*", pos))
            return k + 1
        segs, k = segs + [t], k + 1
        if toks[k][0] == "::":
            k += 1
            continue
        name = t
        if toks[k][0] == "as":
            name, k = toks[k + 1][0], k + 2
        if t == "self":
            segs = segs[:-1]
            name = segs[-1] if name == "self" and segs else name
        out.append((segs, name, pos))
        return k


class File:
    def __init__(self, src, rel):
        self.rel, self.mod = rel, module_of(rel)
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            self.code = strip(f.read())
        self.lines = [0] + [m.end() for m in re.finditer("\n", self.code)]
        self.scopes = []  # (start, end, name) of inline `mod name { }` blocks
        for m in INLINE_MOD.finditer(self.code):
            depth, j = 0, m.end() - 1
            while j < len(self.code):
                depth += {"{": 1, "}": -1}.get(self.code[j], 0)
                if depth == 0:
                    break
                j += 1
            self.scopes.append((m.start(), j, m.group(1)))
        top = lambda p: not any(a <= p <= b for a, b, _ in self.scopes)
        self.children = {m.group(1) for m in CHILD_MOD.finditer(self.code) if top(m.start())}
        self.defines = set(DEFINES.findall(self.code))
        self.macros = MACRO_EXPORT.findall(self.code)
        self.refs, self.binds = [], {}  # refs: (offset, absolute segments, is macro)
        self.reexports = {}  # offset of a leaf of a `pub use` -> the name it binds
        code = list(self.code)
        for m in USE.finditer(self.code):
            public = PUB_BEFORE.search(self.code, max(0, m.start() - 40), m.start())
            toks = [(t.group(), m.start(1) + t.start()) for t in TOKEN.finditer(m.group(1))]
            leaves = []
            try:
                parse_use(toks + [("", m.end())] * 3, 0, [], leaves)
            except IndexError:
                pass
            for segs, name, pos in leaves:
                absolute = self.absolute(segs, pos)
                if absolute is not None:
                    self.refs.append((pos, absolute, False))
                    if name not in ("*", "_") and top(pos):
                        self.binds[name] = absolute
                    if public:
                        self.reexports[pos] = name
            code[m.start():m.end()] = re.sub(r"[^\n]", " ", m.group())
        for m in list(CHILD_MOD.finditer(self.code)) + list(VIS_IN.finditer(self.code)):
            code[m.start():m.end()] = re.sub(r"[^\n]", " ", m.group())
        self.bare = "".join(code)  # the code without `use` items, `mod child;` and `pub(in path)`
        for m in PATH.finditer(self.bare):
            segs = [m.group(1)] + re.split(r"\s*::\s*", m.group(2).strip())[1:]
            absolute = self.absolute(segs, m.start())
            if absolute is not None:
                self.refs.append((m.start(), absolute, bool(m.group(3))))

    def used_at(self, name):
        """Where the code (outside `use` items) names `name` on its own, None if nowhere: not
        `x.name` or `x::name`, nor a field, parameter or binding (`name:`) or an item of that name.
        A lower-case name (a function or a module, like most variables) counts only as `name(`,
        `name::` or `name!`."""
        if name in ("*", "_", "self"):
            return None
        after = r"\s*(?:\(|::|!)" if name[0].islower() else r"(?!\w|\s*:(?!:))"
        for m in re.finditer(r"(?<![\w$.:])%s%s" % (re.escape(name), after), self.bare):
            if not DECLARES.search(self.bare, max(0, m.start() - 20), m.start()):
                return m.start()
        return None

    def scope(self, pos):
        return self.mod + [name for a, b, name in sorted(self.scopes) if a <= pos <= b]

    def absolute(self, segs, pos):
        """`segs` as written at `pos`, made absolute (without `crate`); None: not this crate."""
        if not segs:
            return None
        if segs[0] in ABSOLUTE:
            return segs[1:]
        if segs[0] in ("self", "super"):
            cur, i = self.scope(pos), segs[0] == "self"
            while i < len(segs) and segs[i] == "super":
                cur, i = cur[:-1], i + 1
            return cur + segs[i:]
        return self.mod + segs if segs[0] in self.children else None

    def line(self, pos):
        return bisect.bisect_right(self.lines, pos)


class Crate:
    def __init__(self, src, rels):
        self.files = {rel: File(src, rel) for rel in rels}
        self.macros = {name: f.rel for f in self.files.values() for name in f.macros}

    def module_file(self, segs):
        base = "/".join(segs)
        for rel in ([base + ".rs", base + "/mod.rs"] if segs else ["lib.rs"]):
            if rel in self.files:
                return rel
        return None

    def resolve(self, segs, is_macro=False, depth=0):
        """The file that defines what the absolute path `segs` names, or None."""
        if is_macro and len(segs) == 1 and segs[0] in self.macros:
            return self.macros[segs[0]]
        k = next(k for k in range(len(segs), -1, -1) if self.module_file(segs[:k]) or k == 0)
        rel, rest = self.module_file(segs[:k]), segs[k:]
        if rel is None or not rest:
            return rel
        target = self.files[rel].binds.get(rest[0])
        if target is not None and depth < MAX_REEXPORT_DEPTH:
            return self.resolve(target + rest[1:], is_macro, depth + 1)
        if rel == "lib.rs" and rest[0] not in self.files[rel].defines:
            return self.macros.get(rest[0])
        return rel


def matches(rel, p):
    return rel == p or p == "*" or (p.endswith("/") and rel.startswith(p))


def allowed_pair(u, t):
    return (u, t) in ALLOWED_PAIRS or (t, u) in ALLOWED_PAIRS


def sccs(graph):
    """The strongly connected components with more than one node (by reachability: graphs are small)."""
    reach = {}
    for v in graph:
        seen, todo = set(), [v]
        while todo:
            for w in graph.get(todo.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        reach[v] = seen
    comps = {frozenset(w for w in reach[v] if v in reach.get(w, ())) for v in graph if v in reach[v]}
    return sorted(sorted(c) for c in comps if len(c) > 1)


def shortest_cycle(graph, comp):
    """The shortest cycle inside the component `comp`, as its nodes in order (first not repeated)."""
    best = None
    for start in sorted(comp):
        parent, todo, depth = {start: None}, [start], 1
        while todo and (best is None or depth < len(best)):
            nxt = []
            for v in todo:
                for w in sorted(graph.get(v, ())):
                    if w == start and (best is None or depth < len(best)):
                        path = [v]
                        while parent[path[-1]] is not None:
                            path.append(parent[path[-1]])
                        best = path[::-1]
                    elif w in comp and w not in parent:
                        parent[w] = v
                        nxt.append(w)
            todo, depth = nxt, depth + 1
    return best


def file_graph(crate, rels):
    """rel -> target rel -> (line, reference) of the earliest reference of `rel` into `target`.

    Every file takes part (lib.rs and the front end included). A `pub use` item declares a name
    and is no edge, unless the file's own code names what it binds; `mod child;` is no edge."""
    graph = {}
    for rel in rels:
        f = crate.files[rel]
        for pos, segs, is_macro in sorted(f.refs):
            where, note = pos, ""
            if pos in f.reexports:
                where = f.used_at(f.reexports[pos])
                if where is None:
                    continue
                note = f" (its `pub use` on line {f.line(pos)} binds `{f.reexports[pos]}`, named here)"
            target = crate.resolve(segs, is_macro)
            if target is None or target == rel:
                continue
            shown = "::".join(["crate"] + segs) + ("!" if is_macro else "")
            edge = graph.setdefault(rel, {}).get(target)
            if edge is None or f.line(where) < edge[0]:
                graph[rel][target] = (f.line(where), shown + note)
    return graph


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crate", choices=["engine", "frontend"], default="engine",
                    help="the crate to check (default: engine)")
    ap.add_argument("--src", help="its source tree (default: engine/src, or src for the front end)")
    ap.add_argument("--graph", action="store_true", help="print every unit's outgoing edges")
    ap.add_argument("--dot", action="store_true", help="print the unit graph as Graphviz dot")
    ap.add_argument("--files", action="store_true",
                    help="print every file's outgoing edges, each with the line of one reference")
    args = ap.parse_args()
    global LAYERS, ABSOLUTE, ALLOWED_FILE_CYCLES
    if args.crate == "frontend":
        # There `placelab::` is the engine, another crate: not a path into this one.
        LAYERS, ABSOLUTE, ALLOWED_FILE_CYCLES = FRONTEND_LAYERS, ("crate", "$crate"), {}
    args.src = args.src or ("src" if args.crate == "frontend" else "engine/src")
    out = sys.stderr if args.dot else sys.stdout
    errors, warnings = [], {}  # warnings: key -> message, so that each is printed once
    layer, patterns = {}, {}
    for num, unit, pats in LAYERS:
        if unit in layer:
            errors.append(f"table: unit {unit} is listed twice")
        layer[unit] = num
        for p in pats:
            if p in patterns:
                errors.append(f"table: pattern {p} is in both {patterns[p]} and {unit}")
            patterns[p] = unit
    for unit in {u for pair in ALLOWED_PAIRS for u in pair}:
        if unit not in layer:
            errors.append(f"table: {unit} (in ALLOWED_PAIRS) is not a unit")
    if not os.path.isdir(args.src):
        sys.exit(f"layers: no directory {args.src}")
    rels = sorted(os.path.relpath(os.path.join(d, f), args.src).replace(os.sep, "/")
                  for d, _, fs in os.walk(args.src) for f in fs if f.endswith(".rs"))
    crate = Crate(args.src, rels)
    units = {rel: max([(len(p), u) for p, u in patterns.items() if matches(rel, p)], default=(0, None))[1]
             for rel in rels}
    for p, unit in patterns.items():
        if not any(matches(rel, p) for rel in rels):
            warnings[p] = f"pattern {p} (unit {unit}) matches no file"
    for rel in rels:
        if units[rel] is None:
            errors.append(f"file {args.src}/{rel} is in no layer: add it to the table in .ci/layers.py")

    edges, seen = {}, set()  # edges: unit -> target unit -> [files]
    for rel in rels:
        f, unit = crate.files[rel], units[rel]
        if unit is None or unit == ROOT:
            continue
        for pos, segs, is_macro in sorted(f.refs):
            shown = "::".join(["crate"] + segs) + ("!" if is_macro else "")
            target = crate.resolve(segs, is_macro)
            if target is None:
                warnings.setdefault(shown, f"{args.src}/{rel}:{f.line(pos)}: cannot resolve {shown}")
                continue
            tunit = units[target]
            if tunit is None or tunit == unit:
                continue
            edges.setdefault(unit, {}).setdefault(tunit, [])
            if rel not in edges[unit][tunit]:
                edges[unit][tunit].append(rel)
            if tunit == ROOT or allowed_pair(unit, tunit) or layer[tunit] < layer[unit] or (rel, shown) in seen:
                continue
            seen.add((rel, shown))
            why = ("two units on one layer may not import each other" if layer[tunit] == layer[unit]
                   else "a layer may only import layers below it")
            errors.append(f"{args.src}/{rel}:{f.line(pos)}: names {shown} (unit {tunit}, layer "
                          f"{layer[tunit]}) but is in unit {unit} (layer {layer[unit]}): {why}")
        folder = next((d for d in FORBIDDEN_NAMES if rel.startswith(d)), None)
        for word in FORBIDDEN_NAMES.get(folder, []):
            lines = sorted({f.line(m.start()) for m in re.finditer(r"(?<![\w$])%s\b" % word, f.code)})
            if lines:
                more = f" (also line {', '.join(map(str, lines[1:]))})" if lines[1:] else ""
                errors.append(f"{args.src}/{rel}:{lines[0]}: {FORBIDDEN_LABEL.get(folder, folder)} names "
                              f"`{word}`; {FORBIDDEN_WHY[folder]}{more}")

    unit_graph = {u: {t for t in ts if not allowed_pair(u, t)} for u, ts in edges.items()}
    cycles = sccs(unit_graph)
    for comp in cycles:
        errors.append("cycle between units " + ", ".join(comp) + ":" + "".join(
            f"\n    {u} -> {t} ({args.src}/{edges[u][t][0]})" for u in comp for t in sorted(unit_graph[u]) if t in comp))

    files = file_graph(crate, rels)
    file_cycles = sccs(files)
    for comp in file_cycles:
        why = ALLOWED_FILE_CYCLES.get(frozenset(comp))
        if why is not None:
            continue
        short = shortest_cycle(files, set(comp))
        errors.append("cycle between files " + ", ".join(f"{args.src}/{r}" for r in comp) + ":" +
                      (f"\n    shortest: {' -> '.join(args.src + '/' + r for r in short + short[:1])}"
                       if len(comp) > 2 else "") + "".join(
            f"\n    {args.src}/{a} -> {args.src}/{b} ({args.src}/{a}:{files[a][b][0]}: {files[a][b][1]})"
            for a in comp for b in sorted(files[a]) if b in comp))
    for cycle in ALLOWED_FILE_CYCLES:
        # Inside a larger cycle it still is one (that larger cycle is the error above).
        if not any(cycle <= set(comp) for comp in file_cycles):
            warnings[cycle] = ("ALLOWED_FILE_CYCLES lists " + ", ".join(sorted(cycle)) +
                               ", which is no cycle (any more): remove it")

    n_edges = sum(len(ts) for ts in edges.values())
    if args.graph:
        for num, unit, _ in LAYERS:
            ts = sorted(edges.get(unit, {}), key=lambda t: (-layer[t], t))
            print(f"{unit} (layer {num}) -> [{', '.join(ts)}]")
            for t in ts:
                print(f"    {t} ({layer[t]}): {', '.join(args.src + '/' + r for r in edges[unit][t])}")
    if args.files:
        for rel in rels:
            ts = sorted(files.get(rel, {}))
            print(f"{args.src}/{rel} -> [{', '.join(args.src + '/' + b for b in ts)}]")
            for b in ts:
                line, shown = files[rel][b]
                print(f"    {args.src}/{b} (line {line}: {shown})")
    if args.dot:
        print("digraph layers {\n  rankdir=TB; node [shape=box];")
        for num in sorted({num for num, _, _ in LAYERS}, reverse=True):
            names = " ".join(f'"{u}" [label="{u}\\nlayer {num}"];' for n, u, _ in LAYERS if n == num)
            print(f"  {{ rank=same; {names} }}")
        for u, ts in sorted(edges.items()):
            for t in sorted(ts):
                bad = t != ROOT and layer[t] >= layer[u] and not allowed_pair(u, t)
                print(f'  "{u}" -> "{t}"' + (" [color=red];" if bad else ";"))
        print("}")
    for w in warnings.values():
        print("warning: " + w, file=sys.stderr)
    for e in errors:
        print(e, file=out)
    if errors:
        print(f"layers: {len(errors)} problem(s) in {len(rels)} files", file=out)
        return 1
    used = {u for u in units.values() if u}
    n_file_edges = sum(len(ts) for ts in files.values())
    allowed = f" ({len(ALLOWED_FILE_CYCLES)} allowed)" if ALLOWED_FILE_CYCLES else ""
    print(f"layers: {len(rels)} files in {len(used)} units, {n_edges} unit edges, {n_file_edges} "
          f"file edges, no cycle{allowed}, every edge points down", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
