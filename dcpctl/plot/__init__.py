"""Pictures for `--picture FILE`: matplotlib figures drawn from plain plan and recommend values."""
