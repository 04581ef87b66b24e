"""What an environment with `runtime: kubernetes` declares, checked as hostile input.

A workflow file's environment may say:

    runtime: kubernetes            # or process (the default): a process local to each worker
    image: registry.example/acme/etl:1.4.2    # a tag or a digest is required: never an implicit latest
    python: python3                # the interpreter inside the image (default python3)
    resources: {cpu: 500m, memory: 1Gi, nvidia.com/gpu: 1}
    volume: {size: 10Gi, storage_class: fast}
    idle_timeout_seconds: 600

Each value ends up in a manifest the API server of the platform's cluster reads, so
every one is matched against a strict grammar and bounded before it is stored.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

# The reference grammar of the distribution spec, lowercase repository path, a tag or a digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# A first component is a registry only with a dot, a port, or as localhost (as docker reads it).
_DOMAIN = rf"(?:localhost(?::[0-9]{{1,5}})?|{_LABEL}(?:\.{_LABEL})+(?::[0-9]{{1,5}})?|{_LABEL}:[0-9]{{1,5}})"
IMAGE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
                   r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[a-f0-9]{64}))?$")
MAX_IMAGE = 255
PYTHON = re.compile(r"^[A-Za-z0-9_./+-]{1,200}$")
CPU = re.compile(r"^(?P<n>[0-9]{1,6}(?:\.[0-9]{1,3})?)(?P<milli>m?)$")
MEMORY = re.compile(r"^(?P<n>[0-9]{1,7})(?P<unit>Ki|Mi|Gi|Ti)?$")
STORAGE = re.compile(r"^(?P<n>[0-9]{1,7})(?P<unit>Mi|Gi|Ti)$")
STORAGE_CLASS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# Bounds: one environment is one pod on one node.
MAX_CPU_MILLI, MIN_CPU_MILLI = 64_000, 10
MIN_MEMORY, MAX_MEMORY = 64 * 2**20, 512 * 2**30
MIN_VOLUME, MAX_VOLUME = 2**30, 16 * 2**40
MAX_GPU = 8
DEFAULT_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
DEFAULT_VOLUME = {"size": "1Gi"}


class PodSpecError(Exception):
    """One field of an environment's pod is not acceptable."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def pod_settings(runtime: str, image: str | None, python: str | None, resources: dict[str, Any] | None,
                 volume: dict[str, Any] | None) -> dict[str, Any] | None:
    """Return the `pod` an environment stores (None for runtime process), or raise PodSpecError."""
    if runtime == "process":
        for field, value in (("image", image), ("resources", resources), ("volume", volume)):
            if value is not None:
                raise PodSpecError(field, "only an environment with runtime kubernetes takes this key")
        return None
    if image is None:
        raise PodSpecError("image", "an environment with runtime kubernetes needs an image")
    match = IMAGE.match(image) if len(image) <= MAX_IMAGE else None
    if match is None:
        raise PodSpecError("image", "not an image reference such as registry.example/team/name:1.2.3")
    if not match.group("tag") and not match.group("digest"):
        raise PodSpecError("image", "the image needs a tag or a digest (an implicit latest is not reproducible)")
    if python is not None and not PYTHON.match(python):
        raise PodSpecError("python", "the interpreter inside the image must be a plain command or path")
    return {"image": image, "python": python or "python3", "resources": _resources(resources or {}),
            "volume": _volume(volume or {})}


def _resources(given: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - {"cpu", "memory", "nvidia.com/gpu"})
    if unknown:
        raise PodSpecError(f"resources.{unknown[0]}"[:80], "unknown resource (cpu, memory and nvidia.com/gpu are known)")
    out: dict[str, Any] = dict(DEFAULT_RESOURCES)
    if "cpu" in given:
        cpu = given["cpu"]
        text = str(cpu) if isinstance(cpu, (int, float, str)) and not isinstance(cpu, bool) else ""
        match = CPU.match(text)
        milli = None
        if match:
            try:
                milli = Decimal(match.group("n")) * (1 if match.group("milli") else 1000)
            except InvalidOperation:
                milli = None
        if milli is None or milli != milli.to_integral_value() or not MIN_CPU_MILLI <= milli <= MAX_CPU_MILLI:
            raise PodSpecError("resources.cpu", f"a CPU quantity from {MIN_CPU_MILLI}m to {MAX_CPU_MILLI // 1000} "
                                                "(such as 500m or 2)")
        out["cpu"] = f"{int(milli)}m"
    if "memory" in given:
        out["memory"] = _bytes(given["memory"], MEMORY, MIN_MEMORY, MAX_MEMORY, "resources.memory",
                               "a memory quantity from 64Mi to 512Gi (such as 512Mi or 4Gi)")
    if "nvidia.com/gpu" in given:
        gpu = given["nvidia.com/gpu"]
        if not isinstance(gpu, int) or isinstance(gpu, bool) or not 0 <= gpu <= MAX_GPU:
            raise PodSpecError("resources.nvidia.com/gpu", f"a whole number of GPUs from 0 to {MAX_GPU}")
        if gpu:
            out["nvidia.com/gpu"] = gpu
    return out


def _volume(given: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - {"size", "storage_class"})
    if unknown:
        raise PodSpecError(f"volume.{unknown[0]}"[:80], "unknown key (size and storage_class are known)")
    out: dict[str, Any] = dict(DEFAULT_VOLUME)
    if "size" in given:
        out["size"] = _bytes(given["size"], STORAGE, MIN_VOLUME, MAX_VOLUME, "volume.size",
                             "a disk size from 1Gi to 16Ti (such as 10Gi)")
    if given.get("storage_class") is not None:
        name = given["storage_class"]
        if not isinstance(name, str) or len(name) > 253 or not STORAGE_CLASS.match(name):
            raise PodSpecError("volume.storage_class", "not a storage class name (lowercase letters, digits, - and .)")
        out["storage_class"] = name
    return out


def _bytes(value: Any, grammar: re.Pattern[str], low: int, high: int, field: str, sentence: str) -> str:
    text = value if isinstance(value, str) else ""
    match = grammar.match(text)
    if match is None or not low <= int(match.group("n")) * UNITS[match.group("unit")] <= high:
        raise PodSpecError(field, sentence)
    return text
