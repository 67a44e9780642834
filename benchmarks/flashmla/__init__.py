"""FlashMLA probes: one `bench kernel` cell timed several ways, and the kernel's answer for a zero-length
row."""
