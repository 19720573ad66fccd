"""Computes: AmlCompute clusters, ComputeInstances and attached computes,
with azure.ai.ml.entities' names and arguments."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from tide.ml.entities._resource import Resource, _Settings


class AmlComputeSshSettings(_Settings):
    """SSH access to a cluster's nodes."""

    _fields = ("admin_username", "admin_password", "ssh_key_value")

    def __init__(self, *, admin_username: Optional[str] = None, admin_password: Optional[str] = None,
                 ssh_key_value: Optional[str] = None) -> None:
        self.admin_username = admin_username
        self.admin_password = admin_password
        self.ssh_key_value = ssh_key_value


class ComputeInstanceSshSettings(_Settings):
    """SSH access to an instance: the public key that may log in."""

    _fields = ("ssh_key_value",)

    def __init__(self, *, ssh_key_value: Optional[str] = None) -> None:
        self.ssh_key_value = ssh_key_value


class NetworkSettings(_Settings):
    """The network a compute's nodes join."""

    _fields = ("vnet_name", "subnet")

    def __init__(self, *, vnet_name: Optional[str] = None, subnet: Optional[str] = None) -> None:
        self.vnet_name = vnet_name
        self.subnet = subnet


class IdentityConfiguration(_Settings):
    """A compute's identity: system_assigned or user_assigned."""

    _fields = ("type", "user_assigned_identities")

    def __init__(self, *, type: str, user_assigned_identities: Optional[List[Any]] = None) -> None:
        self.type = type
        self.user_assigned_identities = user_assigned_identities


class Compute(Resource):
    """A compute of any type; get/list return the subclass for its type."""

    _fields = Resource._fields + ("type", "location")

    def __init__(self, *, name: str, type: Optional[str] = None, location: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.type = type
        self.location = location

    @staticmethod
    def _from_rest(d: Dict[str, Any]) -> "Compute":
        cls = {"amlcompute": AmlCompute, "computeinstance": ComputeInstance}.get(str(d.get("type", "")).lower(), Compute)
        obj = cls.__new__(cls)
        Resource.__init__(obj, name=d.get("name"), description=d.get("description"), tags=d.get("tags"))
        for f in cls._fields:
            setattr(obj, f, None)
        obj._load_status(d)
        return obj


class AmlCompute(Compute):
    """A compute cluster that scales between min_instances and max_instances
    nodes and back after idle_time_before_scale_down seconds."""

    _fields = Compute._fields + ("size", "tier", "min_instances", "max_instances",
                                 "idle_time_before_scale_down", "ssh_public_access_enabled",
                                 "ssh_settings", "network_settings", "identity", "enable_node_public_ip")

    def __init__(self, *, name: str, description: Optional[str] = None, size: Optional[str] = None,
                 tags: Optional[Dict[str, str]] = None, ssh_public_access_enabled: Optional[bool] = None,
                 ssh_settings: Optional[AmlComputeSshSettings] = None, min_instances: Optional[int] = None,
                 max_instances: Optional[int] = None, network_settings: Optional[NetworkSettings] = None,
                 idle_time_before_scale_down: Optional[int] = None,
                 identity: Optional[IdentityConfiguration] = None, tier: Optional[str] = None,
                 enable_node_public_ip: Optional[bool] = None, location: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, type="amlcompute", location=location, description=description,
                         tags=tags, **kwargs)
        self.size = size
        self.tier = _tier(tier)
        self.min_instances = min_instances
        self.max_instances = max_instances
        self.idle_time_before_scale_down = idle_time_before_scale_down
        self.ssh_public_access_enabled = ssh_public_access_enabled
        self.ssh_settings = ssh_settings
        self.network_settings = network_settings
        self.identity = identity
        self.enable_node_public_ip = enable_node_public_ip


class ComputeInstance(Compute):
    """A person's own machine: one node with SSH and Jupyter, that stops
    itself after idle_time_before_shutdown_minutes and runs schedules."""

    _fields = Compute._fields + ("size", "ssh_public_access_enabled", "ssh_settings",
                                 "idle_time_before_shutdown", "idle_time_before_shutdown_minutes",
                                 "schedules", "setup_scripts", "create_on_behalf_of",
                                 "network_settings", "identity", "enable_node_public_ip")

    def __init__(self, *, name: str, size: Optional[str] = None, description: Optional[str] = None,
                 tags: Optional[Dict[str, str]] = None, ssh_public_access_enabled: Optional[bool] = None,
                 ssh_settings: Optional[ComputeInstanceSshSettings] = None,
                 idle_time_before_shutdown: Optional[str] = None,
                 idle_time_before_shutdown_minutes: Optional[int] = None,
                 schedules: Optional[Dict[str, Any]] = None, setup_scripts: Optional[Dict[str, Any]] = None,
                 create_on_behalf_of: Optional[Dict[str, Any]] = None,
                 network_settings: Optional[NetworkSettings] = None,
                 identity: Optional[IdentityConfiguration] = None,
                 enable_node_public_ip: Optional[bool] = None, location: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, type="computeinstance", location=location, description=description,
                         tags=tags, **kwargs)
        self.size = size
        self.ssh_public_access_enabled = ssh_public_access_enabled
        self.ssh_settings = ssh_settings
        self.idle_time_before_shutdown = idle_time_before_shutdown
        self.idle_time_before_shutdown_minutes = idle_time_before_shutdown_minutes
        self.schedules = schedules
        self.setup_scripts = setup_scripts
        self.create_on_behalf_of = create_on_behalf_of
        self.network_settings = network_settings
        self.identity = identity
        self.enable_node_public_ip = enable_node_public_ip


def _tier(t: Optional[str]) -> Optional[str]:
    """Azure's SDK takes Dedicated/LowPriority; the YAML dedicated/low_priority."""
    if t is None:
        return None
    return {"lowpriority": "low_priority", "low_priority": "low_priority",
            "dedicated": "dedicated"}.get(t.replace("-", "").lower(), t)
