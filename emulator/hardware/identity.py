"""EC2 identity of an emulated instance, stable for a seed.

Identifiers are derived from SHA-256 of the seed (one hash per field), never random, so the same
seed always gives the same instance, and different emulated nodes of a cluster differ.
Defaults: region ``us-west-2``, AZ ``us-west-2d``, AZ id ``usw2-az4`` (a Trn1 GA region; the
values of the real outputs, docs/reference/trn1-platform.md §Identity strings).
"""

from __future__ import annotations

import hashlib
import re

from emulator.hardware.instance_types import get_instance_type
from neurontools.contract.inventory import InstanceIdentity

DEFAULT_REGION = "us-west-2"
DEFAULT_AVAILABILITY_ZONE = "us-west-2d"
DEFAULT_AVAILABILITY_ZONE_ID = "usw2-az4"

_INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8}([0-9a-f]{9})?$")
_AMI_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")
_AZ_ID_RE = re.compile(r"^[a-z]{2,}[0-9]+-az[0-9]+$")

# compound direction words whose AZ-id abbreviation is two letters (ap-southeast-2 -> apse2)
_DIRECTIONS = {"northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw"}


def _hex(seed: str, field: str, n: int) -> str:
    return hashlib.sha256(f"neurontools/{field}/{seed}".encode()).hexdigest()[:n]


def region_abbreviation(region: str) -> str:
    """Prefix of the region's AZ ids: ``us-west-2`` -> ``usw2``, ``ap-southeast-2`` -> ``apse2``."""
    if not _REGION_RE.match(region):
        raise ValueError(f"invalid region {region!r}: expected e.g. {DEFAULT_REGION!r}")
    parts = region.split("-")
    middle = "".join(_DIRECTIONS.get(p, p[0]) for p in parts[1:-1])
    return f"{parts[0]}{middle}{parts[-1]}"


def _zone_id_for(zone: str, region: str) -> str:
    # AZ name -> id mapping is per account; use the letter's position (a -> az1, d -> az4, which
    # gives the default pair us-west-2d / usw2-az4).
    return f"{region_abbreviation(region)}-az{ord(zone[-1]) - ord('a') + 1}"


def _check(value: str | None, pattern: re.Pattern[str], what: str, example: str) -> None:
    if value is not None and (not isinstance(value, str) or not pattern.match(value)):
        raise ValueError(f"invalid {what} {value!r}: expected e.g. {example!r} (pattern {pattern.pattern})")


def make_identity(
    instance_type: str,
    *,
    seed: str,
    instance_id: str | None = None,
    availability_zone: str | None = None,
    region: str | None = None,
    availability_zone_id: str | None = None,
    ami_id: str | None = None,
    subnet_id: str | None = None,
    instance_name: str = "",
) -> InstanceIdentity:
    """Identity of an emulated ``instance_type`` host; unset fields are derived from ``seed``.

    Without a region or AZ the host is in ``us-west-2d`` / ``usw2-az4``. Given only an AZ, the
    region is the AZ without its trailing letter; given only a region other than ``us-west-2``, the
    AZ is its ``a`` zone. An AZ id not given is ``<region abbreviation>-az<letter position>``.
    Raises ``ValueError`` with the offending value for anything malformed or inconsistent.
    """
    get_instance_type(instance_type)  # validates the name
    if not isinstance(seed, str):
        raise ValueError(f"seed must be a string, got {type(seed).__name__}")
    if not isinstance(instance_name, str):
        raise ValueError(f"instance name must be a string, got {type(instance_name).__name__}")
    _check(instance_id, _INSTANCE_ID_RE, "instance id", "i-0bea223b1afb7e159")
    _check(ami_id, _AMI_RE, "AMI id", "ami-0123456789abcdef0")
    _check(subnet_id, _SUBNET_RE, "subnet id", "subnet-0123456789abcdef0")
    _check(region, _REGION_RE, "region", DEFAULT_REGION)
    _check(availability_zone_id, _AZ_ID_RE, "availability zone id", DEFAULT_AVAILABILITY_ZONE_ID)
    region, availability_zone, availability_zone_id = _placement(region, availability_zone, availability_zone_id)
    return InstanceIdentity(
        instance_name=instance_name,
        instance_id=instance_id or f"i-0{_hex(seed, 'instance-id', 16)}",
        instance_type=instance_type,
        instance_availability_zone=availability_zone,
        instance_availability_zone_id=availability_zone_id,
        instance_region=region,
        ami_id=ami_id or f"ami-{_hex(seed, 'ami-id', 17)}",
        subnet_id=subnet_id or f"subnet-{_hex(seed, 'subnet-id', 17)}",
    )


def _placement(
    region: str | None, availability_zone: str | None, availability_zone_id: str | None
) -> tuple[str, str, str]:
    """(region, AZ, AZ id) from those given, as ``make_identity`` describes; ValueError if inconsistent."""
    if availability_zone is not None and (
        not isinstance(availability_zone, str) or not re.match(r"^[a-z0-9-]+[0-9][a-z]$", availability_zone)
    ):
        raise ValueError(f"invalid availability zone {availability_zone!r}: expected e.g. 'us-west-2d'")
    if availability_zone is None:
        region = region or DEFAULT_REGION
        availability_zone = DEFAULT_AVAILABILITY_ZONE if region == DEFAULT_REGION else f"{region}a"
    elif region is None:
        region = availability_zone[:-1]
        _check(region, _REGION_RE, f"region (derived from availability zone {availability_zone!r})", "us-west-2")
    elif availability_zone[:-1] != region:
        raise ValueError(f"availability zone {availability_zone!r} is not in region {region!r}")
    if availability_zone_id is None:
        return region, availability_zone, _zone_id_for(availability_zone, region)
    prefix = region_abbreviation(region)
    if not availability_zone_id.startswith(f"{prefix}-az"):
        raise ValueError(
            f"availability zone id {availability_zone_id!r} does not belong to region {region!r} "
            f"(expected {prefix}-az<N>)"
        )
    return region, availability_zone, availability_zone_id


def device_serial_number(seed: str, device: int) -> str:
    """Stable 16-hex-digit serial number of device ``device`` (sysfs ``info/serial_number``)."""
    return _hex(seed, f"serial/{device}", 16)
