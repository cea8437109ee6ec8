#!/usr/bin/env python3
"""Kiln's layering, checked: base -> ir -> ops -> compiler -> runtime -> tools/server.

A file may include headers of its own layer and of the layers below it, never above; the
folders below `server/generate` and `server/metrics` count as the server. Exit 1 listing every
include that runs up.
"""
import pathlib
import re
import sys

# Rank of each top-level folder; a file may include ranks <= its own. tools/, loadtest/ and
# server/ are siblings at the top: none includes another.
RANKS = {"base": 0, "ir": 1, "ops": 2, "compiler": 3, "runtime": 4,
         "tools": 5, "loadtest": 5, "server": 5}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer(path):
    top = path.split("/", 1)[0]
    return top if top in RANKS else None


def violations(root):
    for src in sorted(root.rglob("*")):
        if src.suffix not in (".h", ".cc", ".cu") or "node_modules" in src.parts:
            continue
        rel = src.relative_to(root).as_posix()
        own = layer(rel)
        if own is None:
            continue
        for n, line in enumerate(src.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = layer(m.group(1))
            if target is None or target == own:
                continue
            if RANKS[target] >= RANKS[own]:
                yield f"{rel}:{n}: {own} includes {m.group(1)} ({target})"


def self_test():
    """The checker finds an include that runs up and one across, and passes one that runs
    down."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for rel, text in {"ir/graph.h": '#include "base/status.h"\n',
                          "compiler/a.cc": '#include "ir/graph.h"\n#include "runtime/x.h"\n',
                          "server/s.cc": '#include "tools/t.h"\n'}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        found = list(violations(root))
        assert len(found) == 2, found
        assert found[0].startswith("compiler/a.cc:2:"), found
        assert found[1].startswith("server/s.cc:1:"), found
    print("layering self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    found = list(violations(root))
    for v in found:
        print(v)
    print(f"layering: {len(found)} include(s) running up or across")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
