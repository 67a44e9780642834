"""PD disaggregation for the bundled runtime: transfer plan (plain ints) and a one-world driver."""
from dcpctl.runtime.pd.plan import PAGE, RELAYOUT, PDError, Transfer, plan_transfers, transfer_path

__all__ = ["PAGE", "PDError", "RELAYOUT", "Transfer", "plan_transfers", "transfer_path"]
