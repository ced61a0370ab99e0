#!/usr/bin/env python3
"""docs/OPTIONS.md against the code that parses what it documents, so that the next drift fails CI:
- the cluster file's keys, as the parser itself lists them (its `unknown key '...' (known: ...)` refusal for a
  bogus key in each section), each in OPTIONS.md's "Cluster file" section;
- the CLI's subcommands and flags (`blockps --help`, `blockps SUB --help`) in OPTIONS.md's "blockps CLI" section,
  and every subcommand in its `(subcommand)` row;
- the Python package's exports (`blockps.__all__`, `blockps.torch.__all__` where torch is there) in its "Python"
  section, and every `blockps.NAME` / `blockps.torch.NAME` OPTIONS.md names exists;
- every file of the Python package (`client/python/blockps/...py`) that README.md or a docs/*.md names exists.
(The bsopts keys are checked against their table by a unit test, LuOptions.EveryKeyIsDocumented.)

    test_docs_match_code.py --repo REPO --cli PATH-TO-blockps --python-dir BUILD/python
"""
import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL: {what}")


def section(doc, title_start):
    """The text of the `## ` section whose title starts with `title_start`, up to the next `## `."""
    m = re.search(r"^## " + re.escape(title_start) + r".*?$(.*?)(?=^## |\Z)", doc, re.M | re.S)
    if not m:
        fail(f"docs/OPTIONS.md has no section '## {title_start}...'")
        return ""
    return m.group(1)


def cluster_file_keys(cli):
    """section -> the keys the parser knows, from its own refusal of a bogus key there."""
    base = {
        "top level": "zz_bogus = 1\n",
        "model": "[model]\nsize = \"1M\"\nzz_bogus = 1\n",
        "layout": "[model]\nsize = \"1M\"\n[layout]\nzz_bogus = 1\n",
        "client": "[model]\nsize = \"1M\"\n[client]\nzz_bogus = 1\n",
        "shard": "[model]\nsize = \"1M\"\n[[shard]]\nzz_bogus = 1\n",
    }
    keys = {}
    with tempfile.TemporaryDirectory() as d:
        for name, text in base.items():
            path = os.path.join(d, "c.toml")
            with open(path, "w") as f:
                f.write(text)
            r = subprocess.run([cli, "-c", path, "status"], capture_output=True, text=True, timeout=60)
            m = re.search(r"unknown key 'zz_bogus' \(known: ([^)]*)\)", r.stderr + r.stdout)
            if not m:
                fail(f"cluster file [{name}]: the parser did not list its keys for a bogus one: {r.stderr.strip()}")
                continue
            keys[name] = [k.strip() for k in m.group(1).split(",") if k.strip()]
    return keys


def cli_help(cli, *args):
    r = subprocess.run([cli, *args, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"blockps {' '.join(args)} --help exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--python-dir", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.repo, "docs/OPTIONS.md")) as f:
        doc = f.read()

    print("--- cluster-file keys")
    cluster_doc = section(doc, "Cluster file")
    for name, keys in cluster_file_keys(args.cli).items():
        for k in keys:
            # A row names a key as `[section] key` (or `key` in a list of them), a section as `[key]`.
            if not re.search(r"(`|\] )" + re.escape(k) + "`", cluster_doc) and f"[{k}]" not in cluster_doc:
                fail(f"cluster file key '{k}' ([{name}]) is not in OPTIONS.md's 'Cluster file' section")

    print("--- CLI subcommands and flags")
    cli_doc = section(doc, "blockps CLI")
    top = cli_help(args.cli)
    subcommands = re.findall(r"^  ([a-z]+)\s{2,}", top.split("Subcommands:")[-1], re.M) if "Subcommands:" in top else []
    if not subcommands:
        fail("blockps --help lists no subcommands")
    row = re.search(r"^\| \(subcommand\) \|.*$", cli_doc, re.M)
    for sub in subcommands:
        if not row or f"`{sub}`" not in row.group(0):
            fail(f"subcommand '{sub}' is not in OPTIONS.md's (subcommand) row")
        if f"### `blockps {sub}" not in cli_doc:
            fail(f"subcommand '{sub}' has no '### `blockps {sub} ...`' section in OPTIONS.md")
        for flag in sorted(set(re.findall(r"(--[a-z][a-z0-9-]*)", cli_help(args.cli, sub))) - {"--help"}):
            if f"`{flag}" not in cli_doc and f" {flag}" not in cli_doc:
                fail(f"blockps {sub} {flag} is not in OPTIONS.md's 'blockps CLI' section")
    for flag in sorted(set(re.findall(r"(--[a-z][a-z0-9-]*)", top)) - {"--help"}):
        if f"`{flag}" not in cli_doc and f" {flag}" not in cli_doc:
            fail(f"blockps {flag} is not in OPTIONS.md's 'blockps CLI' section")

    print("--- Python exports")
    sys.path.insert(0, args.python_dir)
    blockps = importlib.import_module("blockps")
    modules = {"blockps": blockps}
    try:
        modules["blockps.torch"] = importlib.import_module("blockps.torch")
    except ImportError as e:  # no torch for this python: its names are not checked
        print(f"NOTE: blockps.torch not importable here ({e}): its exports are not checked")
    for mod_name, mod in modules.items():
        for name in getattr(mod, "__all__", []):
            if f"{mod_name}.{name}" not in doc and f"`{name}" not in doc:
                fail(f"{mod_name}.{name} (in __all__) is not in OPTIONS.md")
    for mod_name, attr in sorted(set(re.findall(r"\b(blockps(?:\.torch)?)\.([A-Za-z_][A-Za-z0-9_]*)\b", doc))):
        if mod_name == "blockps" and attr in ("torch", "h"):  # blockps.h: the C API's header, not a Python name
            continue
        mod = modules.get(mod_name)
        if mod is not None and not hasattr(mod, attr) and not os.path.exists(
                os.path.join(args.python_dir, *mod_name.split("."), attr + ".py")):
            fail(f"OPTIONS.md names {mod_name}.{attr}, which the package does not have")

    print("--- Python files the docs name")
    for name in ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(args.repo, "docs"))
                                       if f.endswith(".md")):
        with open(os.path.join(args.repo, name)) as f:
            text = f.read()
        for path in sorted(set(re.findall(r"client/python/blockps/[A-Za-z0-9_/]*\.py", text))):
            if not os.path.exists(os.path.join(args.repo, path)):
                fail(f"{name} names {path}, which the package does not have")

    if failures:
        print(f"{len(failures)} place(s) where the docs and the code disagree")
        return 1
    print("PASS: docs/OPTIONS.md matches the cluster-file parser, the CLI and the Python package; the docs name no "
          "Python file the package lacks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
