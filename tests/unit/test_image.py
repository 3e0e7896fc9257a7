"""The image recipe: pinned base, numeric non-root user, and a build context that carries nothing local.

The image itself is built and smoke-run by scripts/build-image.sh and scripts/smoke-image.sh (`make image`,
.ci/run); these check the recipe, and the parts of those scripts that need no container.
"""

from __future__ import annotations

import base64
import email.parser
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from landb_webhook.adapters.cloudconf import connection_options

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
CHART_WEBHOOK = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())["provider"]["webhook"]


def script_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "lib" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stage_starts_from_a_base_pinned_by_digest() -> None:
    [base] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE, re.MULTILINE)

    assert re.fullmatch(r"python:3\.11[\w.-]*@sha256:[0-9a-f]{64}", base)
    assert stages == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]


def test_the_user_is_the_numeric_one_the_chart_values_run_as() -> None:
    [user] = re.findall(r"^USER (\d+):(\d+)$", DOCKERFILE, re.MULTILINE)
    context = CHART_WEBHOOK["securityContext"]

    assert (int(user[0]), int(user[1])) == (context["runAsUser"], context["runAsGroup"]) != (0, 0)


def test_the_build_context_is_exactly_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    allowed = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        source.rstrip("/")
        for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", DOCKERFILE, re.MULTILINE)
        for source in sources.split()
    }

    assert lines[0] == "*"  # everything else (.venv, .tools, state/, .git, caches) stays out
    assert allowed == copied == {"pyproject.toml", "uv.lock", "README.md", "src", "image-pins"}


def test_the_build_steps_verify_the_index_with_the_bundle_the_build_mounts_over_the_base_one() -> None:
    build_stage = DOCKERFILE.split("\nFROM ")[1]
    mounted = re.findall(r':(/[^:\s"]+):ro"', (ROOT / "scripts" / "build-image.sh").read_text())

    assert mounted == ["/etc/ssl/certs/ca-certificates.crt"]
    assert f"SSL_CERT_FILE={mounted[0]}" in build_stage and f"PIP_CERT={mounted[0]}" in build_stage


def test_the_contents_check_names_what_a_dev_environment_holds_beyond_the_lock(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(ROOT / ".tools" / "bin")) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make .venv/.synced installs it into .tools)")
    requirements = tmp_path / "requirements.txt"
    export = [uv, "export", "--quiet", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes"]
    requirements.write_text(
        subprocess.run(export, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    )

    # This test's own environment: the project with its test and dev extras, the simulator included.
    checked = subprocess.run(
        [sys.executable, ROOT / "scripts" / "lib" / "image_contents.py", requirements],
        capture_output=True,
        text=True,
        check=False,
    )

    assert checked.returncode == 1
    for tool in ("pytest", "hypothesis", "ruff", "mypy"):
        assert f"{tool} is installed but not a locked production requirement" in checked.stderr
    assert "the simulator is installed" in checked.stderr
    assert "image_contents: pyyaml is installed" not in checked.stderr  # a production requirement (PyYAML)


def test_the_product_wheel_carries_no_simulator_nor_what_only_the_simulator_needs(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(ROOT / ".tools" / "bin")) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (make .venv/.synced installs it into .tools)")
    build = [uv, "build", "--quiet", "--wheel", "--package", "landb-webhook", "--out-dir", str(tmp_path)]
    subprocess.run(build, cwd=ROOT, capture_output=True, text=True, check=True)

    [wheel] = tmp_path.glob("landb_webhook-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        files = archive.namelist()
        [metadata] = [name for name in files if name.endswith(".dist-info/METADATA")]
        requirements = (
            email.parser.Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist")
        )
    always = {
        re.split(r"[<>=!~;\[ ]", requirement)[0].lower()
        for requirement in requirements or ()
        if ";" not in requirement
    }

    assert [name for name in files if "simulator" in name] == []
    assert always & {"landb-webhook-simulator", "jsonpatch", "cryptography"} == set()
    assert "openstacksdk" in always  # the list read is the real one


def test_the_smoke_test_runs_the_sidecar_with_the_charts_settings_and_mounts(tmp_path: Path) -> None:
    smoke = script_module("image_smoke")
    state, ca_pem = tmp_path / "state", b"-----BEGIN CERTIFICATE-----\nsimulator\n-----END CERTIFICATE-----\n"
    state.mkdir()
    (state / "kubeconfig").write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {
                        "cluster": {
                            "server": "https://127.0.0.1:40123",
                            "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                        }
                    }
                ],
                "users": [{"user": {"token": "kube-token"}}],
            }
        )
    )
    trust = {
        "auth_url": "http://127.0.0.1:40000/identity/v3",
        "user_id": "u1",
        "password": "p",
        "trust_id": "t1",
    }
    (state / "clouds.yaml").write_text(yaml.safe_dump({"clouds": {"simulator-trust": {"auth": trust}}}))

    with pytest.MonkeyPatch.context() as patch:
        lines: list[str] = []
        patch.setattr("builtins.print", lambda text: lines.extend(text.splitlines()))
        smoke.setup(str(state), str(tmp_path / "pod"))
    options = dict(line.removeprefix("--").split("=", 1) for line in lines)
    environment = dict(
        line.removeprefix("--env=").split("=", 1) for line in lines if line.startswith("--env=")
    )
    mounts = {
        target: source
        for source, target, mode in (
            line.split("=", 1)[1].split(":") for line in lines if line.startswith("--volume=")
        )
    }

    chart_environment = {variable["name"]: variable["value"] for variable in CHART_WEBHOOK["env"]}
    assert environment == chart_environment | {
        "LANDB_DRY_RUN": "false",  # the smoke test's apply must really write
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "40123",
    }
    assert options["memory"] == CHART_WEBHOOK["resources"]["limits"]["memory"].replace("Mi", "m")
    chart_mounts = {mount["mountPath"] for mount in CHART_WEBHOOK["extraVolumeMounts"]}
    assert chart_mounts <= set(mounts)
    cloud_conf = Path(mounts[str(Path(chart_environment["LANDB_OS_CLOUD_CONF"]).parent)]) / "cloud.conf"
    ca_file = re.search(r'^ca-file = "(.+)"$', cloud_conf.read_text(), re.MULTILINE)
    assert ca_file is not None and ca_file[1] in chart_mounts
    assert Path(mounts[ca_file[1]]).read_bytes() == ca_pem
    # The webhook takes the cloud.conf as it is (its ca-file read where this host has the bundle).
    cloud_conf.write_text(cloud_conf.read_text().replace(ca_file[1], mounts[ca_file[1]]))
    assert connection_options(cloud_conf)["auth"] == {
        "auth_url": "https://127.0.0.1:40123/identity/v3",
        "user_id": "u1",
        "password": "p",
        "trust_id": "t1",
    }
    service_account = Path(mounts["/var/run/secrets/kubernetes.io/serviceaccount"])
    assert (service_account / "token").read_text() == "kube-token"
    assert (service_account / "ca.crt").read_bytes() == ca_pem
    assert (service_account / "namespace").read_text() == "default"


# -- build inputs pinned (issue 36) ------------------------------------------------------------------------

PINS = ROOT / "image-pins"


def pinned(requirements: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of a requirements file written by `uv pip compile --generate-hashes`;
    fails on any requirement not pinned with ``==``."""
    text = re.sub(r"\s*\\\n\s*", " ", re.sub(r"#.*", "", requirements.read_text()))
    found = {}
    for line in filter(str.strip, text.splitlines()):
        matched = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?: --hash=sha256:[0-9a-f]{64})*)", line.strip())
        assert matched, f"{requirements.name}: not pinned by version and hash: {line.strip()}"
        found[matched[1]] = (matched[2], re.findall(r"[0-9a-f]{64}", matched[3]))
    return found


def test_uv_is_installed_by_version_and_hash_only() -> None:
    build_stage = DOCKERFILE.split("\nFROM ")[1]
    [install] = re.findall(r"python3 -m pip install(?:[^\n]*\\\n)*[^\n]*", build_stage)

    assert "--require-hashes -r image-pins/uv.txt" in install and "--no-deps" in install
    assert "'uv" not in build_stage and '"uv' not in build_stage  # no requirement written in the recipe
    [(version, hashes)] = pinned(PINS / "uv.txt").values()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version) and hashes


def test_the_build_backend_and_its_dependencies_are_pinned_by_version_and_hash() -> None:
    """uv sync fetches the build backend pyproject.toml names from PyPI, any version it allows: the wheel
    is built with `uv build` under hash-checked constraints instead, and only installed by uv pip."""
    build_stage = DOCKERFILE.split("\nFROM ")[1]
    constraints = pinned(PINS / "build-constraints.txt")
    pyproject = (ROOT / "pyproject.toml").read_text()
    [backend] = re.findall(r'^requires = \["(\w+)', pyproject, re.MULTILINE)

    assert "--build-constraints image-pins/build-constraints.txt" in build_stage
    assert re.search(
        r"--build-constraints image-pins/build-constraints\.txt \\\n\s+--require-hashes", build_stage
    )
    assert (
        "--no-install-project" in build_stage and "uv sync --frozen --no-dev --no-editable" not in build_stage
    )
    assert backend in constraints
    assert {"packaging", "pathspec", "pluggy", "trove-classifiers"} <= constraints.keys()  # hatchling's
    assert all(hashes for _version, hashes in constraints.values())


def test_the_chart_values_pull_the_webhook_image_by_digest() -> None:
    """A tag can be moved to other content; a digest names exactly the image built. The admin pod runs the
    same one."""
    image = CHART_WEBHOOK["image"]
    admin = yaml.safe_load((ROOT / "deploy" / "landb-webhook-admin.yaml").read_text())
    [admin_container] = admin["spec"]["containers"]

    assert re.fullmatch(r"[\w.-]+@sha256:[0-9a-f]{64}", image["tag"])
    assert admin_container["image"] == f"{image['repository']}:{image['tag']}"
