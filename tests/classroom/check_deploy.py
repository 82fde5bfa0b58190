"""Checks what can be checked here of the Kubernetes deployment (kernelspec/classroom), since
no image can be built and no chart pulled on the project's machines:

- the Dockerfile passes hadolint (from PyPI, pinned in requirements.txt);
- values.yaml parses and holds what placelab relies on: the image built from the Dockerfile,
  PLACELAB_ENGINE where the Dockerfile prebuilds it, memory sized from the load test's
  measured figures (report.json, when given), culling, the pre-puller, a CPU profile on
  simulated GPUs and a GPU profile that asks for an NVIDIA device.

    python check_deploy.py [--report target/classroom/report.json]
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

here = Path(__file__).resolve().parent
deploy = here.parent.parent / "kernelspec" / "classroom"


def bytes_of(quantity):
    """Kubernetes' memory quantity (1G, 512M, 2Gi) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]i?)?", str(quantity))
    if not m:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    units = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(m.group(1)) * units.get(m.group(2) or "", 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", help="the load test's report.json, to check the sizes against")
    args = ap.parse_args()
    problems = []

    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    lint = subprocess.run([hadolint, str(deploy / "Dockerfile")], capture_output=True, text=True)
    if lint.returncode != 0:
        problems.append("hadolint:\n" + lint.stdout + lint.stderr)

    dockerfile = (deploy / "Dockerfile").read_text()
    engine = re.search(r"PLACELAB_ENGINE=(\S+)", dockerfile)
    values = yaml.safe_load((deploy / "values.yaml").read_text())
    user = values.get("singleuser", {})
    if not user.get("image", {}).get("name"):
        problems.append("singleuser.image.name is not set")
    if not engine or user.get("extraEnv", {}).get("PLACELAB_ENGINE") != engine.group(1):
        problems.append("singleuser.extraEnv.PLACELAB_ENGINE is not where the Dockerfile prebuilds it")
    guarantee = bytes_of(user["memory"]["guarantee"])
    limit = bytes_of(user["memory"]["limit"])
    if args.report:
        report = json.loads(Path(args.report).read_text())
        per = report["per_learner_mib"]
        one_notebook = (per["server"] + per["kernel_with_cell_process"]) * 2**20
        # Two notebooks that both completed code within the quiet spell: each with rust-analyzer.
        completing = per.get("kernel_with_cell_and_analyzer_processes", per["kernel_with_cell_process"])
        two_notebooks = (per["server"] + 2 * completing) * 2**20
        if guarantee < one_notebook:
            problems.append(f"the memory guarantee {guarantee:.0f} B is below one learner with one notebook ({one_notebook:.0f} B measured)")
        if limit < two_notebooks:
            problems.append(f"the memory limit {limit:.0f} B is below one learner with two notebooks ({two_notebooks:.0f} B measured)")
    if not (values.get("cull", {}).get("enabled") and values["cull"].get("timeout")):
        problems.append("culling is not enabled with a timeout")
    if not values.get("prePuller", {}).get("continuous", {}).get("enabled"):
        problems.append("the continuous pre-puller is off")
    profiles = user.get("profileList", [])
    cpu = [p for p in profiles if p.get("kubespawner_override", {}).get("environment", {}).get("PLACELAB_SIMULATE_CUDA")]
    gpu = [
        p
        for p in profiles
        if any(k.startswith("nvidia.com/") for k in p.get("kubespawner_override", {}).get("extra_resource_limits", {}))
    ]
    if not cpu:
        problems.append("no CPU profile with simulated GPUs")
    if not gpu:
        problems.append("no GPU profile (an nvidia.com/ resource)")

    for p in problems:
        print("deployment:", p)
    print(f"deployment: {len(problems)} problem(s); hadolint clean: {lint.returncode == 0}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
