from dcpctl.plan import presets
from dcpctl.plan.hardware import hardware_from_dict
from dcpctl.plan.model import spec_from_config
from dcpctl.plan.planner import make_plan
from dcpctl.plan.request import PlanRequest
from dcpctl.plan.topology import Topology


def model(name="deepseek-v3"):
    return spec_from_config(presets.get("models", name)["config"], name=name)


def hw(name="h200-8"):
    return hardware_from_dict(presets.hardware_profiles()[name], name)


def plan(model_name="deepseek-v3", hardware="h200-8", **kw):
    topo_keys = set(Topology.__dataclass_fields__)
    topo = Topology(**{k: v for k, v in kw.items() if k in topo_keys})
    rest = {k: v for k, v in kw.items() if k not in topo_keys}
    return make_plan(PlanRequest(topology=topo, model=model(model_name), hardware=hw(hardware), **rest))


def codes(p):
    return [v.code for v in p.violations]
