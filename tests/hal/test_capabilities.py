import pytest

import hal


def test_defaults_are_the_vulkan_minimums():
    caps = hal.Capabilities()
    assert caps.max_push_constants_size == 128
    assert caps.max_storage_buffer_range == 1 << 27
    assert caps.max_per_stage_descriptor_storage_buffer == 4
    assert caps.supports_float64 is False


def test_overrides_replace_fields_and_keep_the_rest():
    caps = hal.Capabilities().with_overrides({"supports_float64": True, "max_workgroup_count": [8, 4, 2]})
    assert caps.supports_float64 is True
    assert caps.max_workgroup_count == (8, 4, 2)
    assert caps.max_push_constants_size == 128


@pytest.mark.parametrize("overrides, match", [
    ({"no_such_field": 1}, "unknown capability 'no_such_field'"),
    ({"supports_float64": 1}, "supports_float64 takes True or False"),
    ({"max_push_constants_size": -4}, "must be >= 0"),
    ({"max_push_constants_size": True}, "must be an integer"),
    ({"max_workgroup_size": (1, 2)}, "three positive integers"),
    ([("supports_int8", True)], "must be a mapping"),
])
def test_bad_overrides_are_refused(overrides, match):
    with pytest.raises(hal.ValidationError, match=match):
        hal.Capabilities().with_overrides(overrides)


def test_device_capabilities_can_be_overridden_at_creation():
    with hal.create_device("host", capabilities={"max_push_constants_size": 16}) as dev:
        assert dev.capabilities.max_push_constants_size == 16
    with hal.create_device("host") as dev:
        assert dev.capabilities.max_push_constants_size == 256
