"""Pictures (`--picture FILE`): matplotlib figures of plain plan and recommend values; matplotlib is imported only here, on demand."""
