#!/usr/bin/env python3
"""Regenerate the golden files of one NCCL release by running NCCL's own host-side graph code.

    regenerate.py NCCL_SRC TAG [KIND ...] [--only GLOB] [--build-dir DIR] [--nicksim DIR] [--check]

NCCL_SRC is an NCCL git repository (a clone or a bare mirror; TAG is exported from it with
`git archive`, the repository itself is left as it is) or an NCCL source tree whose
makefiles/version.mk matches TAG. TAG is a release tag such as v2.30.7-1. KIND is one or more of

    search      nccl-search/VERSION.SYSTEM.SHAPE[.KNOB=VALUE].txt[.gz]
    graph       nccl-graph/VERSION.SYSTEM.SHAPE.txt[.gz]
    graph-xml   nccl-graph-xml/VERSION.SYSTEM.SHAPE.graph.xml, collnet-VERSION.SYSTEM.SHAPE.xml

(default: all three). The files rewritten are those of TAG's version that exist already; for a
release newer than every one there, the names of the newest release are taken over. A file whose
content (decompressed, for .gz) comes out the same is left untouched; one that differs is rewritten
and listed, so `git diff --stat tests/golden` shows what changed. A case NCCL fails on is reported
and leaves its file alone. --check writes nothing and exits non-zero when some file would change.
"""
import argparse
import fnmatch
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
GOLDEN = HARNESS.parent
REPO = GOLDEN.parent.parent
TOPOLOGIES = REPO / "topologies"

KINDS = {"search": "nccl-search", "graph": "nccl-graph", "graph-xml": "nccl-graph-xml"}
# debug.cc's prefix of an INFO line: "host:pid:tid [cudaDev] NCCL INFO " (hostnames hold no blanks).
INFO_PREFIX = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO ")
GRAPH_LINE = re.compile(r"^(Pattern \d+, |\s*\d+ :)")
GZIP_ABOVE = 16 * 1024  # a new text file larger than this is stored gzipped (as the 72-GPU system's are)


class Case:
    """One golden file: which system, how many nodes, which knobs, and how NCCL is run for it."""

    def __init__(self, kind, name, system, nodes, env):
        self.kind, self.name, self.system, self.nodes, self.env = kind, name, system, nodes, env

    @property
    def collnet(self):
        return self.env.get("NCCL_COLLNET_ENABLE") == "1"


def parse_name(kind, name, version):
    """The case a golden file name stands for, or None when the name is not one of VERSION's."""
    if kind == "graph-xml":
        m = re.fullmatch(r"(collnet-)?(\d+\.\d+\.\d+)\.([^.]+)\.(1node|2nodes)(\.graph)?\.xml", name)
        if not m or m.group(2) != version or bool(m.group(1)) == bool(m.group(5)):
            return None
        env = {"NCCL_COLLNET_ENABLE": "1"} if m.group(1) else {}
        return Case(kind, name, m.group(3), 1 if m.group(4) == "1node" else 2, env)
    base = name[:-3] if name.endswith(".gz") else name
    if not base.endswith(".txt"):
        return None
    parts = base[: -len(".txt")].split(".")
    if len(parts) < 5 or ".".join(parts[:3]) != version or parts[4] not in ("1node", "2nodes"):
        return None
    env = {}
    if len(parts) > 5:
        if kind != "search":
            return None
        key, _, value = ".".join(parts[5:]).partition("=")
        env[key] = value
    return Case(kind, name, parts[3], 1 if parts[4] == "1node" else 2, env)


def cases_for(kind, version):
    """VERSION's files of KIND; for a release newer than all, the newest release's names moved to VERSION."""
    folder = GOLDEN / KINDS[kind]
    names = sorted(p.name for p in folder.iterdir() if p.is_file())
    mine = [c for c in (parse_name(kind, n, version) for n in names) if c]
    if mine:
        return mine
    versions = set()
    for n in names:
        m = re.search(r"(\d+)\.(\d+)\.(\d+)\.", n)
        if m:
            versions.add(tuple(int(x) for x in m.groups()))
    if not versions or tuple(int(x) for x in version.split(".")) <= max(versions):
        return []  # an older release simply has no files of this kind
    newest = ".".join(map(str, max(versions)))
    out = []
    for n in names:
        c = parse_name(kind, n, newest)
        if c:
            c.name = n.replace(newest, version, 1)
            out.append(c)
    return out


def export_tree(src, tag, dest):
    """An NCCL source tree of TAG: exported from a git repository into DEST (reused while it holds the
    same commit), or SRC itself where it is a source tree of that release."""
    src = Path(src).resolve()
    git = ["git", "-C", str(src)]
    commit = subprocess.run(git + ["rev-parse", "--verify", "-q", f"{tag}^{{commit}}"], capture_output=True)
    if commit.returncode == 0:
        commit = commit.stdout.decode().strip()
        stamp = dest / ".commit"
        if stamp.exists() and stamp.read_text() == commit:
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.Popen(git + ["archive", "--format=tar", commit], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            sys.exit(f"regenerate: git archive {tag} failed")
        stamp.write_text(commit)
        return dest
    mk = src / "makefiles" / "version.mk"
    if not mk.is_file():
        sys.exit(f"regenerate: {src} has no tag {tag} and is no NCCL source tree")
    fields = dict(re.findall(r"^(NCCL_\w+)\s*:=\s*(\S*)", mk.read_text(), re.M))
    have = f"{fields.get('NCCL_MAJOR')}.{fields.get('NCCL_MINOR')}.{fields.get('NCCL_PATCH')}"
    if have != tag_version(tag):
        sys.exit(f"regenerate: {src} is NCCL {have}, not {tag}")
    return src


def tag_version(tag):
    m = re.fullmatch(r"v?(\d+\.\d+\.\d+)(-\d+)?", tag)
    if not m:
        sys.exit(f"regenerate: {tag} is not a release tag like v2.30.7-1")
    return m.group(1)


def collnet_topology(system, nicksim, work):
    """The catalog topology with coll="1" on its NICs, as `nicksim topo SYSTEM --sharp --dump-xml` writes it."""
    path = work / f"{system}.collnet.xml"
    if not path.exists():
        env = dict(os.environ, PYTHONPATH=str(nicksim))
        proc = subprocess.run([sys.executable, "-m", "nicksim", "topo", system, "--sharp", "--dump-xml", str(path)],
                              env=env, capture_output=True, cwd=work)
        if proc.returncode != 0 or not path.exists():
            sys.exit(f"regenerate: nicksim topo {system} --sharp --dump-xml failed:\n{proc.stderr.decode()}")
    return path


def run_driver(driver, case, topology, work):
    """NCCL's INFO lines (prefix removed) for one case, plus the graph dump for graph-xml."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env["NCCL_IGNORE_DISABLED_P2P"] = "2"  # no NVML P2P status without a GPU (paths.cc)
    env.update(case.env)
    args = [str(driver), "--nodes", str(case.nodes)]
    dump = None
    if case.kind == "graph":
        args.append("--system")
    else:
        args.append("--search")
    if case.kind == "graph-xml":
        dump = work / "graphs.xml"
        if dump.exists():
            dump.unlink()
        env["NCCL_GRAPH_DUMP_FILE"] = str(dump)
    args.append(str(topology))
    proc = subprocess.run(args, env=env, capture_output=True, cwd=work)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        what = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
        return None, f"NCCL failed ({what}): " + " | ".join(tail)
    lines = []
    for raw in proc.stdout.decode(errors="replace").split("\n"):
        m = INFO_PREFIX.match(raw)
        if m:
            lines.append(raw[m.end():])
    if case.kind == "search":
        text = "".join(line + "\n" for line in lines if GRAPH_LINE.match(line))
        if not text:
            return None, "no graph printed"
    elif case.kind == "graph":
        start = next((i for i, line in enumerate(lines) if line.startswith("=== System")), None)
        if start is None:
            return None, "no system printed"
        text = "".join(line + "\n" for line in lines[start:])
    else:
        if not dump.exists():
            return None, "no graph dump written"
        text = dump.read_text()
    return text, None


def read_golden(path):
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).decode()


def write_golden(path, text):
    data = text.encode()
    if path.name.endswith(".gz"):
        with open(path, "wb") as f, gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=f, mtime=0) as g:
            g.write(data)
    else:
        path.write_bytes(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nccl_src", help="NCCL git repository (or source tree of TAG)")
    ap.add_argument("tag", help="release tag, e.g. v2.30.7-1")
    ap.add_argument("kinds", nargs="*", metavar="KIND", help="search, graph, graph-xml (default: all)")
    ap.add_argument("--only", action="append", metavar="GLOB", help="only files whose name matches GLOB")
    ap.add_argument("--build-dir", help="keep the exported sources and the build here (reused by later runs)")
    ap.add_argument("--nicksim", default=str(REPO),
                    help="folder holding the nicksim package, for the CollNet topologies (default: this repository)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if some file would change")
    args = ap.parse_args()
    kinds = args.kinds or list(KINDS)
    for kind in kinds:
        if kind not in KINDS:
            ap.error(f"unknown kind {kind} (search, graph, graph-xml)")
    version = tag_version(args.tag)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="nccl-golden-") as tmp:
        work = Path(tmp)
        build = Path(args.build_dir).resolve() if args.build_dir else work / "build"
        tree = export_tree(args.nccl_src, args.tag, build / "nccl")
        subprocess.run([str(HARNESS / "build.sh"), str(tree), str(build)], check=True)
        driver = build / "nccl_topo_driver"
        built = time.monotonic()

        counts = {"same": 0, "changed": 0, "new": 0, "failed": 0}
        for kind in kinds:
            folder = GOLDEN / KINDS[kind]
            for case in cases_for(kind, version):
                if args.only and not any(fnmatch.fnmatch(case.name, g) for g in args.only):
                    continue
                topology = TOPOLOGIES / f"{case.system}.xml"
                if not topology.exists():
                    print(f"  skipped  {KINDS[kind]}/{case.name}: no topologies/{case.system}.xml")
                    counts["failed"] += 1
                    continue
                if case.collnet:
                    topology = collnet_topology(case.system, args.nicksim, work)
                text, error = run_driver(driver, case, topology, work)
                path = folder / case.name
                if error:
                    print(f"  failed   {KINDS[kind]}/{case.name}: {error}")
                    counts["failed"] += 1
                    continue
                if path.exists():
                    if read_golden(path) == text:
                        counts["same"] += 1
                        continue
                    state = "changed"
                else:
                    state = "new"
                    if len(text.encode()) > GZIP_ABOVE and kind != "graph-xml" and not path.name.endswith(".gz"):
                        path = path.with_name(path.name + ".gz")
                counts[state] += 1
                print(f"  {state:8} {KINDS[kind]}/{path.name}")
                if not args.check:
                    write_golden(path, text)
        if args.build_dir is None:
            shutil.rmtree(build, ignore_errors=True)
    done = time.monotonic()
    print(f"NCCL {version}: {counts['same']} unchanged, {counts['changed']} changed, {counts['new']} new, "
          f"{counts['failed']} failed (build {built - started:.0f} s, runs {done - built:.0f} s)")
    if counts["failed"] or (args.check and (counts["changed"] or counts["new"])):
        sys.exit(1)


if __name__ == "__main__":
    main()
