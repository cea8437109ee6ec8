#!/usr/bin/env python3
"""Kiln's layering, checked: base -> ir -> ops -> compiler -> runtime -> tools/server.

A file may include headers of its own layer and of the layers below it, never above. Inside
the server the roles are layered the same way: common -> generate -> metrics -> model ->
repository -> serving -> grpc | http -> kilnd (server/main.cc); grpc and http are siblings
and include nothing of each other. Exit 1 listing every include that runs up or across.
"""
import pathlib
import re
import sys

# Rank of each top-level folder; a file may include ranks <= its own. tools/, loadtest/ and
# server/ are siblings at the top: none includes another.
RANKS = {"base": 0, "ir": 1, "ops": 2, "compiler": 3, "runtime": 4,
         "tools": 5, "loadtest": 5, "server": 5}
# The server's roles (server/<role>/), ranked the same way; files directly in server/ (main.cc)
# are kilnd itself, above every role.
SERVER_RANKS = {"common": 0, "generate": 1, "metrics": 2, "model": 3, "repository": 4,
                "serving": 5, "grpc": 6, "http": 6}
KILND = 7
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer(path):
    top = path.split("/", 1)[0]
    return top if top in RANKS else None


def server_role(path):
    """(role, rank) of a path under server/: its role folder, or kilnd for server/ itself."""
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in SERVER_RANKS:
        return parts[1], SERVER_RANKS[parts[1]]
    if len(parts) > 2:
        return parts[1], -1  # an unknown role folder: reported by its own includes' ranks
    return "kilnd", KILND


def server_violation(own_path, target_path):
    own, own_rank = server_role(own_path)
    target, target_rank = server_role(target_path)
    if own == target:
        return None
    if target_rank > own_rank or (target_rank == own_rank and own != target) or own_rank < 0:
        return f"server/{own} includes server/{target}"
    return None


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
            if target == own == "server":
                why = server_violation(rel, m.group(1))
                if why:
                    yield f"{rel}:{n}: {why} ({m.group(1)})"
                continue
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
                          "server/s.cc": '#include "tools/t.h"\n',
                          "server/model/m.cc": '#include "server/common/c.h"\n'
                                               '#include "server/serving/r.h"\n',
                          "server/grpc/g.cc": '#include "server/http/h.h"\n'
                                              '#include "server/serving/r.h"\n',
                          "server/main.cc": '#include "server/grpc/g.h"\n'}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        found = list(violations(root))
        assert len(found) == 4, found
        assert found[0].startswith("compiler/a.cc:2:"), found
        assert found[1].startswith("server/grpc/g.cc:1: server/grpc includes server/http"), found
        assert found[2].startswith("server/model/m.cc:2: server/model includes server/serving"), found
        assert found[3].startswith("server/s.cc:1:"), found
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
