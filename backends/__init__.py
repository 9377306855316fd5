"""The backends: each folder implements hal's API for one kind of device, with the same modules."""
