"""Carry files larger than one device command allows to a GPU machine, over several commands.

The device tool carries 64 MiB per command (working tree included), and the GPU run needs the
default model's GGUF (98 MB), the shipped heads (~60 MB) and the training conversations. `pack`
cuts the files, in the order the run needs them, into parts that each fit beside the tree;
`unpack`, run on the GPU machine at the start of each command, adds one part to a staging folder
that outlives the command while the machine stays warm, and assembles every file whose pieces are
all there (checked against its sha256).

    python scripts/gpu_stage.py pack OUT --capacity BYTES NAME=PATH ...   # here: OUT/p1, OUT/p2, ...
    python scripts/gpu_stage.py unpack PART STAGE                          # there: STAGE/files/NAME
    python scripts/gpu_stage.py tree-bytes                                 # what travels besides the parts
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
LIMIT = 64 * MIB  # the device tool's limit on what one command carries, working tree included
MANIFEST = "manifest.json"


def sha256(path: Path) -> str:
    # not specviz.runtime.loading's: this script runs on the GPU machine before the wheels specviz needs
    # (platformdirs) are unpacked, so it imports nothing of the project
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_bytes(repo: Path = Path(".")) -> int:
    """Bytes of what the device tool sends from this checkout: tracked files and untracked files
    git does not ignore (deleted-but-tracked files are not there to send)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                         capture_output=True, check=True).stdout
    paths = {p for p in out.decode().split("\0") if p}
    return sum((repo / p).stat().st_size for p in paths if (repo / p).is_file() and not (repo / p).is_symlink())


def expand(named: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """NAME=FOLDER becomes one entry per file under it (NAME/relative path), in sorted order."""
    files = []
    for name, path in named:
        if path.is_dir():
            files += [(f"{name}/{p.relative_to(path).as_posix()}", p) for p in sorted(path.rglob("*")) if p.is_file()]
        elif path.is_file():
            files.append((name, path))
        else:
            raise SystemExit(f"nothing at {path} (for {name})")
    return files


def pack(out: Path, capacity: int, named: list[tuple[str, Path]]) -> list[dict]:
    """Cut the files, in order, into parts of at most `capacity` bytes; returns the parts' plans."""
    if out.exists():
        shutil.rmtree(out)
    files = expand(named)
    manifest = {"files": {}, "parts": 0}
    parts: list[list] = [[]]
    room = capacity
    for name, path in files:
        size, off, pieces = path.stat().st_size, 0, []
        while off < size or (size == 0 and not pieces):
            if room <= 0:
                parts.append([])
                room = capacity
            n = min(room, size - off)
            piece = f"{len(parts)}-{len(parts[-1])}.bin"
            parts[-1].append((piece, path, off, n))
            pieces.append(piece)
            off += n
            room -= n
            if size == 0:
                break
        manifest["files"][name] = {"size": size, "sha256": sha256(path), "pieces": pieces}
    manifest["parts"] = len(parts)
    plans = []
    for i, part in enumerate(parts, start=1):
        d = out / f"p{i}"
        d.mkdir(parents=True)
        for piece, path, off, n in part:
            with open(path, "rb") as src, open(d / piece, "wb") as dst:
                src.seek(off)
                dst.write(src.read(n))
        (d / MANIFEST).write_text(json.dumps(manifest, indent=1))
        plans.append({"part": d.name, "bytes": sum(n for *_, n in part) + (d / MANIFEST).stat().st_size,
                      "files": sorted({name for name, f in manifest["files"].items() if set(f["pieces"]) &
                                       {p for p, *_ in part}})})
    return plans


def unpack(part: Path, stage: Path) -> tuple[list[str], list[str]]:
    """Add a part's pieces to `stage` and assemble every complete file; returns (ready, missing)."""
    manifest = json.loads((part / MANIFEST).read_text())
    (stage / "pieces").mkdir(parents=True, exist_ok=True)
    for piece in part.glob("*.bin"):
        shutil.copyfile(piece, stage / "pieces" / piece.name)
    ready, missing = [], []
    for name, f in manifest["files"].items():
        dst = stage / "files" / name
        if dst.is_file() and dst.stat().st_size == f["size"]:
            ready.append(name)
            continue
        if not all((stage / "pieces" / p).is_file() for p in f["pieces"]):
            missing.append(name)
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        with open(tmp, "wb") as out:
            for p in f["pieces"]:
                with open(stage / "pieces" / p, "rb") as src:
                    shutil.copyfileobj(src, out)
        if sha256(tmp) != f["sha256"]:
            tmp.unlink()
            raise SystemExit(f"{name}: the assembled file does not match its sha256 (a piece is damaged)")
        tmp.replace(dst)
        for p in f["pieces"]:
            (stage / "pieces" / p).unlink(missing_ok=True)
        ready.append(name)
    return ready, missing


def _roots(names: list[str]) -> str:
    """File names grouped by their top folder, for a one-line summary."""
    tops: dict[str, int] = {}
    for n in names:
        tops[n.split("/")[0] if "/" in n else n] = tops.get(n.split("/")[0] if "/" in n else n, 0) + 1
    return ", ".join(f"{t} ({k} files)" if k > 1 else t for t, k in tops.items()) or "-"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    cmd = argv[0]
    if cmd == "tree-bytes":
        print(tree_bytes())
        return 0
    if cmd == "pack":
        out, cap, named = Path(argv[1]), None, []
        rest = argv[2:]
        while rest:
            a = rest.pop(0)
            if a == "--capacity":
                cap = int(rest.pop(0))
            else:
                name, _, path = a.partition("=")
                named.append((name, Path(path)))
        if not cap or cap <= 0:
            raise SystemExit("pack needs --capacity BYTES > 0 (64 MiB less the working tree)")
        for plan in pack(out, cap, named):
            print(f"{plan['part']}: {plan['bytes'] / MIB:6.1f} MiB  {_roots(plan['files'])}")
        return 0
    if cmd == "unpack":
        ready, missing = unpack(Path(argv[1]), Path(argv[2]))
        print(f"staged in {argv[2]}/files: ready {_roots(ready)}; still to come {_roots(missing)}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
