"""The pins are written twice: hack/versions.env for the shell build scripts, qwen_fleet/versions.py for Python.
They must agree, name for name (the env file's NAME_VERSION is the module's NAME; K8S is KUBERNETES)."""

from __future__ import annotations

from pathlib import Path

from qwen_fleet import versions

ENV_FILE = Path(__file__).resolve().parents[2] / "hack" / "versions.env"
# Pins only the shell side uses: Debian packages of the real node's runtime (installed by hack/real-node-deps.sh).
SHELL_ONLY_PREFIX = "DEB_"
# Derived in Python from a pin, not a pin of its own.
DERIVED = {"VLLM_IMAGE"}


def env_pins() -> dict[str, str]:
    pins = {}
    for raw in ENV_FILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        assert key.endswith("_VERSION"), f"{ENV_FILE}: {line!r} is not a NAME_VERSION=value pin"
        pins[key.removesuffix("_VERSION")] = value
    return pins


def python_pins() -> dict[str, str]:
    return {name: value for name, value in vars(versions).items()
            if name.isupper() and isinstance(value, str) and name not in DERIVED}


def test_every_python_pin_is_the_shell_pin_of_the_same_name() -> None:
    env = {("KUBERNETES" if k == "K8S" else k): v for k, v in env_pins().items()}
    py = python_pins()
    assert py, "versions.py has no pins"
    mismatched = {name: (value, env.get(name)) for name, value in py.items() if env.get(name) != value}
    assert mismatched == {}, f"versions.py vs hack/versions.env (python, shell): {mismatched}"
    shell_only = sorted(k for k in env if k not in py and not k.startswith(SHELL_ONLY_PREFIX))
    assert shell_only == [], f"pins in hack/versions.env that versions.py lacks: {shell_only}"


def test_the_image_tag_is_the_engine_pin() -> None:
    image, tag = versions.VLLM_IMAGE.split(":")
    assert (image, tag) == ("vllm/vllm-openai", "v" + env_pins()["VLLM"])
