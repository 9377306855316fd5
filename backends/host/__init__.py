"""The numpy host backend: the default without a GPU, and the oracle of the tests."""

from backends.host.device import HostDevice, HostDriver

__all__ = ["HostDevice", "HostDriver"]
