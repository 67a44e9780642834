"""Two plans (prefill, decode) -> one PD launch config for the bundled runtime (docs/pd.md); pure."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dcpctl.contract.launch_config import (Disaggregation, GroupsSection, LaunchConfig, PDInstance,
                                           PDLaunchConfig)
from dcpctl.launch.config import render_launch_config
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import Plan, make_plan


def pd_transfer_path(prefill_dcp: int, decode_dcp: int) -> str:
    """`page` for equal DCP sizes, `token_relayout` for DCP 1 prefill; any other pair is a UserError."""
    if prefill_dcp == decode_dcp:
        return "page"
    if prefill_dcp == 1:
        return "token_relayout"
    raise UserError(f"prefill dcp ({prefill_dcp}) -> decode dcp ({decode_dcp}) is not supported: use equal "
                    f"sizes or dcp 1 prefill; valid prefill sizes: [1, {decode_dcp}]")


def _shift(groups: GroupsSection, offset: int) -> GroupsSection:
    return GroupsSection(**{kind: tuple(tuple(r + offset for r in g) for g in lists)
                            for kind, lists in groups.lists().items()})


def _instance(cfg: LaunchConfig, first: int) -> PDInstance:
    return PDInstance(tuple(range(first, first + cfg.world_size)), cfg.topology, _shift(cfg.groups, first),
                      cfg.decisions, cfg.kv)


def render_pd_launch_config(prefill: Plan, decode: Plan, model_path: str | Path, dtype: str, device: str,
                            max_total_tokens: int, chunked_prefill_size: int) -> PDLaunchConfig:
    """One launch of a prefill instance (global ranks first) and a decode instance (the ranks after it).

    Each instance is rendered by `render_launch_config` from its own plan; they must agree on page
    size (checked here) and on the model and dtype (one argument each).  A plan that states its
    disaggregation mode must state the matching one.
    """
    for plan, mode in ((prefill, "prefill"), (decode, "decode")):
        got = plan.request.disaggregation_mode
        if got not in ("null", mode):
            raise UserError(f"the {mode} plan has --disaggregation-mode {got}; expected {mode}")
    path = pd_transfer_path(prefill.request.topology.dcp_size, decode.request.topology.dcp_size)
    if prefill.request.page_size != decode.request.page_size:
        raise UserError(f"prefill page_size ({prefill.request.page_size}) != decode page_size "
                        f"({decode.request.page_size}); PD needs matching page sizes")
    args = (model_path, dtype, device, max_total_tokens, chunked_prefill_size)
    pre, dec = render_launch_config(prefill, *args), render_launch_config(decode, *args)
    for mode, cfg in (("prefill", pre), ("decode", dec)):
        if cfg.topology.attn_dp_size != 1:
            raise UserError(f"the bundled PD runtime needs attn_dp_size 1 on each instance; the {mode} plan "
                            f"has {cfg.topology.attn_dp_size}")
    first = pre.world_size
    return PDLaunchConfig(pre.model, pre.device, pre.dist_backend, first + dec.world_size,
                          Disaggregation(path, _instance(pre, 0), _instance(dec, first)),  # type: ignore[arg-type]
                          runtime=dec.runtime)   # one process world: the decode plan's settings


def peer_plan(plan: Plan) -> Plan:
    """The other PD side of a plan with --disaggregation-mode: same topology, the peer's DCP size."""
    r = plan.request
    peer_mode = "decode" if r.disaggregation_mode == "prefill" else "prefill"
    peer_dcp = r.disaggregation_peer_dcp_size or r.topology.dcp_size
    same = peer_dcp == r.topology.dcp_size
    return make_plan(replace(r, topology=replace(r.topology, dcp_size=peer_dcp),
                             disaggregation_mode=peer_mode, disaggregation_peer_dcp_size=r.topology.dcp_size,
                             dcp_comm_backend=r.dcp_comm_backend if same else None,
                             dcp_replicate_q_proj=None if peer_dcp == 1 else r.dcp_replicate_q_proj))


def render_pd_from_plan(plan: Plan, model_path: str | Path, dtype: str, device: str, max_total_tokens: int,
                        chunked_prefill_size: int) -> PDLaunchConfig:
    """One PD launch from one side's plan (the peer is derived with `peer_plan`)."""
    peer = peer_plan(plan)
    if not peer.valid:
        raise UserError("the peer PD plan is invalid: " + "; ".join(v.message for v in peer.violations))
    prefill, decode = (plan, peer) if plan.request.disaggregation_mode == "prefill" else (peer, plan)
    return render_pd_launch_config(prefill, decode, model_path, dtype, device, max_total_tokens,
                                   chunked_prefill_size)
