"""hubkernels.layers: the HF `kernels`-compatible kernelize API, on small layers of our own and on the
real ltx-kernels build. Scenarios: map a layer, kernelize, see the kernel run; change mode; refuse a
layer that cannot serve the mode; leave the model untouched when a layer is invalid."""

from __future__ import annotations

import logging
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hubkernels.layers import (
    CUDAProperties,
    Device,
    KernelizeFallback,
    LayerMatch,
    LayerNotFoundError,
    LocalLayerRepository,
    Mode,
    ROCMProperties,
    kernelize,
    kernelized_layers,
    register_kernel_mapping,
    replace_kernel_forward_from_hub,
    use_kernel_forward_from_hub,
    use_kernel_mapping,
)
from hubkernels.layers.mapping import current_mapping
from hubkernels.layers.repos import DeviceRepos

# -- small layers and a repository of our own -------------------------------------------------------------


@use_kernel_forward_from_hub("Scale")
class Scale(nn.Module):
    """x * factor; the 'original' every kernel layer below replaces."""

    def __init__(self, factor: float = 2.0) -> None:
        super().__init__()
        self.factor = nn.Parameter(torch.tensor(factor))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class PlusOne(nn.Module):  # compile-safe, has a backward: serves every mode
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 1


class PlusTen(nn.Module):  # not compile-safe (default), has a backward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 10


class PlusHundredNoBackward(nn.Module):
    has_backward = False
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor + 100


class Repo:
    """A repository of our own (RepositoryProtocol: just load()), counting loads."""

    def __init__(self, layer: type) -> None:
        self.layer = layer
        self.loads = 0

    def load(self) -> type:
        self.loads += 1
        return self.layer


@pytest.fixture(autouse=True)
def clean_mapping():
    """Each test starts and ends with an empty global mapping."""
    register_kernel_mapping({}, inherit_mapping=False)
    yield
    register_kernel_mapping({}, inherit_mapping=False)


def model() -> nn.Sequential:
    return nn.Sequential(Scale(2.0), nn.Identity(), Scale(3.0))


X = torch.ones(2, 3)


# -- Mode and Device --------------------------------------------------------------------------------------


def test_mode_rules_match_hf_kernels():
    assert Mode.INFERENCE | Mode.TORCH_COMPILE != Mode.INFERENCE
    with pytest.raises(ValueError, match="mutually exclusive"):
        Mode.INFERENCE | Mode.TRAINING
    with pytest.raises(ValueError, match="FALLBACK cannot be combined"):
        Mode.FALLBACK | Mode.INFERENCE
    with pytest.raises(ValueError, match="only be used to register"):
        kernelize(model(), mode=Mode.FALLBACK)
    with pytest.raises(ValueError, match="INFERENCE or Mode.TRAINING"):
        kernelize(model(), mode=Mode.TORCH_COMPILE)


def test_device_checks_its_properties():
    assert Device("cuda", CUDAProperties(80, 90)).capability_range == (80, 90)
    with pytest.raises(ValueError, match="only supported for 'cuda'"):
        Device("cpu", CUDAProperties(80, 90))
    with pytest.raises(ValueError, match="only supported for 'rocm'"):
        Device("cuda", ROCMProperties(90, 94))
    with pytest.raises(ValueError, match="min_capability"):
        CUDAProperties(90, 80)
    with pytest.raises(ValueError, match="Unsupported device type 'gpu'"):
        Device("gpu")


def test_narrowest_capability_range_wins_and_reregistering_replaces():
    repos = DeviceRepos("cuda")
    wide, narrow, newer = {Mode.FALLBACK: Repo(PlusOne)}, {Mode.FALLBACK: Repo(PlusTen)}, {Mode.FALLBACK: Repo(PlusOne)}
    repos.insert(None, wide)
    repos.insert((80, 89), narrow)
    assert repos.for_capability(90) == wide
    assert repos.for_capability(86) == narrow
    assert repos.for_capability(None) == wide  # unknown capability: only unrestricted entries
    repos.insert((80, 89), newer)
    assert repos.for_capability(86) == newer
    only_ranged = DeviceRepos("cuda")
    only_ranged.insert((90, 90), narrow)
    assert only_ranged.for_capability(80) is None and only_ranged.for_capability(None) is None


# -- mappings ---------------------------------------------------------------------------------------------


def test_use_kernel_mapping_is_scoped_and_can_hide_the_outer_mapping():
    register_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}})
    with use_kernel_mapping({"Other": {"cpu": Repo(PlusTen)}}):
        assert set(current_mapping()) == {"Scale", "Other"}
        with use_kernel_mapping({"Third": {"cpu": Repo(PlusTen)}}, inherit_mapping=False):
            assert set(current_mapping()) == {"Third"}
        assert set(current_mapping()) == {"Scale", "Other"}
    assert set(current_mapping()) == {"Scale"}


def test_a_scoped_mapping_in_another_thread_does_not_leak():
    seen = {}

    def worker():
        with use_kernel_mapping({"Scale": {"cpu": Repo(PlusTen)}}):
            seen["inside"] = set(current_mapping())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["inside"] == {"Scale"}
    assert current_mapping() == {}


def test_register_validates_before_changing_anything():
    with pytest.raises(TypeError, match="has no load"):
        register_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}, "Bad": {"cpu": object()}})
    assert current_mapping() == {}


# -- kernelize --------------------------------------------------------------------------------------------


def test_kernelize_rebinds_instances_not_the_class_and_restores_without_mapping():
    m = model()
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}}):
        assert kernelize(m, mode=Mode.INFERENCE) is m
    assert torch.equal(m(X), (X * 2 + 1) * 3 + 1)
    assert set(kernelized_layers(m)) == {"0", "2"}
    assert torch.equal(Scale(2.0)(X), X * 2)  # the class keeps its forward
    kernelize(m, mode=Mode.INFERENCE)  # no mapping any more: originals back
    assert torch.equal(m(X), X * 6) and kernelized_layers(m) == {}


def test_mode_picks_the_registered_repository_in_hf_priority_order():
    m = model()
    mapping = {"Scale": {"cpu": {Mode.INFERENCE: Repo(PlusOne), Mode.TRAINING: Repo(PlusTen)}}}
    with use_kernel_mapping(mapping):
        kernelize(m, mode=Mode.INFERENCE)
        assert torch.equal(m[0](X), X * 2 + 1)
        kernelize(m, mode=Mode.TRAINING)  # again, with another mode: re-decided per module
        assert torch.equal(m[0](X), X * 2 + 10)
    with use_kernel_mapping({"Scale": {"cpu": {Mode.TRAINING: Repo(PlusTen)}}}):
        kernelize(m, mode=Mode.INFERENCE)  # INFERENCE falls back to a TRAINING registration
        assert torch.equal(m[0](X), X * 2 + 10)


def test_default_mode_follows_model_training_flag():
    m = model()
    with use_kernel_mapping({"Scale": {"cpu": {Mode.INFERENCE: Repo(PlusOne), Mode.TRAINING: Repo(PlusTen)}}}):
        kernelize(m.train())
        assert torch.equal(m[0](X), X * 2 + 10)
        kernelize(m.eval())
        assert torch.equal(m[0](X), X * 2 + 1)


def test_a_layer_that_cannot_serve_the_mode_is_skipped_with_a_reason(caplog):
    m = model()
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusTen)}}):  # FALLBACK-registered, not compile-safe
        kernelize(m, mode=Mode.INFERENCE)
        assert torch.equal(m[0](X), X * 2 + 10)
        with caplog.at_level(logging.WARNING, logger="hubkernels.layers.swap"):
            kernelize(m, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        assert torch.equal(m[0](X), X * 2)  # the original again
        assert "not torch.compile-safe" in caplog.text
        with pytest.raises(ValueError, match="not torch.compile-safe"):
            kernelize(m, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, use_fallback=False)
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusHundredNoBackward)}}):
        kernelize(m, mode=Mode.TRAINING)
        assert torch.equal(m[0](X), X * 2)
        kernelize(m, mode=Mode.INFERENCE)
        assert torch.equal(m[0](X), X * 2 + 100)


def test_a_layer_registered_for_a_mode_it_cannot_serve_is_an_error():
    with use_kernel_mapping({"Scale": {"cpu": {Mode.INFERENCE | Mode.TORCH_COMPILE: Repo(PlusTen)}}}):
        with pytest.raises(ValueError, match="not torch.compile-safe but was registered"):
            kernelize(model(), mode=Mode.INFERENCE | Mode.TORCH_COMPILE)


def test_no_mapping_for_a_marked_layer_raises_without_fallback():
    with pytest.raises(ValueError, match="no kernel mapping for layer 'Scale'"):
        kernelize(model(), mode=Mode.INFERENCE, use_fallback=False)
    with use_kernel_mapping({"Scale": {"cuda": Repo(PlusOne)}}):
        kernelize(model(), mode=Mode.INFERENCE)  # cpu model: no cpu entry, falls back quietly
        with pytest.raises(ValueError, match="no kernel mapped for device type 'cpu'"):
            kernelize(model(), mode=Mode.INFERENCE, use_fallback=KernelizeFallback.NO_LAYER)


class WithInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x):
        return x


class WithMember(nn.Module):
    helper = 1

    def forward(self, x):
        return x


class WithOtherSignature(nn.Module):
    def forward(self, x, y):
        return x


@pytest.mark.parametrize(
    "layer, message",
    [
        (WithInit, "defines __init__"),
        (WithMember, r"has members \['helper'\]"),
        (WithOtherSignature, "same number and kinds of parameters"),
        (int, "not an nn.Module subclass"),
    ],
)
def test_invalid_layers_are_refused_before_anything_is_replaced(layer, message):
    m = nn.Sequential(Scale(2.0), nn.GELU(approximate="tanh"))
    mapping = {"Scale": {"cpu": Repo(PlusOne)}, LayerMatch(nn.GELU): {"cpu": Repo(layer)}}
    with use_kernel_mapping(mapping), pytest.raises(TypeError, match=message):
        kernelize(m, mode=Mode.INFERENCE)
    assert kernelized_layers(m) == {}  # Scale was valid, but nothing was replaced
    with use_kernel_mapping(mapping):  # ALL: an unusable layer falls back instead
        kernelize(m, mode=Mode.INFERENCE, use_fallback=KernelizeFallback.ALL)
    assert set(kernelized_layers(m)) == {"0"}


def test_layers_load_once_per_repository():
    repo = Repo(PlusOne)
    with use_kernel_mapping({"Scale": {"cpu": repo}}):
        for _ in range(3):
            kernelize(model(), mode=Mode.INFERENCE)
    assert repo.loads == 1


def test_layer_match_selects_exact_classes_and_honours_its_condition():
    class MyGELU(nn.GELU):
        pass

    m = nn.Sequential(nn.GELU(approximate="tanh"), nn.GELU(), MyGELU(approximate="tanh"))

    class Twice(nn.Module):
        def forward(self, input):
            return input * 2

    with use_kernel_mapping({LayerMatch(nn.GELU, lambda g: g.approximate == "tanh"): {"cpu": Repo(Twice)}}):
        kernelize(m, mode=Mode.INFERENCE, device="cpu")
    assert set(kernelized_layers(m)) == {"0"}
    assert torch.equal(m[0](X), X * 2) and torch.equal(m[1](X), F.gelu(X))


def test_hf_kernels_marks_are_recognised():
    """Classes decorated with the real HF `kernels` decorator (as transformers does) kernelize here."""
    from kernels import use_kernel_forward_from_hub as hf_use_kernel_forward_from_hub

    @hf_use_kernel_forward_from_hub("Scale", condition=lambda module: module.factor.item() > 2.5)
    class HFScale(nn.Module):
        def __init__(self, factor: float) -> None:
            super().__init__()
            self.factor = nn.Parameter(torch.tensor(factor))

        def forward(self, x):
            return x * self.factor

    m = nn.Sequential(HFScale(2.0), HFScale(3.0))
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}}):
        kernelize(m, mode=Mode.INFERENCE)
    assert set(kernelized_layers(m)) == {"1"}  # its kernel_condition excludes the first


def test_third_party_classes_can_be_marked():
    class Foreign(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.factor = nn.Parameter(torch.tensor(5.0))

        def forward(self, x):
            return x * self.factor

    replace_kernel_forward_from_hub(Foreign, "Scale")
    m = Foreign()
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}}):
        kernelize(m, mode=Mode.INFERENCE)
    assert torch.equal(m(X), X * 5 + 1)


def test_decorated_functions_attached_to_modules_are_kernelized():
    @use_kernel_forward_from_hub("Add")
    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    class AddKernel(nn.Module):
        def forward(self, a, b):
            return a + b + 1

    class User(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.__dict__["_kernel_funcs"] = {"add": add}  # what HF's use_kernelized_func stores

        def forward(self, x):
            return add(x, x)

    user = User()
    with use_kernel_mapping({"Add": {"cpu": Repo(AddKernel)}}):
        kernelize(user, mode=Mode.INFERENCE, device="cpu")
    assert torch.equal(user(X), X * 2 + 1)
    kernelize(user, mode=Mode.INFERENCE, device="cpu")
    assert torch.equal(user(X), X * 2)


def test_disable_kernel_mapping_restores_originals(monkeypatch):
    m = model()
    with use_kernel_mapping({"Scale": {"cpu": Repo(PlusOne)}}):
        kernelize(m, mode=Mode.INFERENCE)
        monkeypatch.setenv("DISABLE_KERNEL_MAPPING", "1")
        kernelize(m, mode=Mode.INFERENCE)
    assert torch.equal(m(X), X * 6)


def test_a_model_without_parameters_needs_a_device():
    with use_kernel_mapping({LayerMatch(nn.GELU): {"cpu": Repo(PlusOne)}}):
        with pytest.raises(ValueError, match="pass device="):
            kernelize(nn.GELU(), mode=Mode.INFERENCE)
        with pytest.raises(ValueError, match="Unsupported device type 'gpu'"):
            kernelize(nn.GELU(), mode=Mode.INFERENCE, device="gpu")


def test_unknown_capability_uses_only_unrestricted_cuda_entries():
    """kernelize(device='cuda') where no GPU can be asked: capability-ranged entries don't apply."""
    m = model()
    mapping = {"Scale": {Device("cuda", CUDAProperties(80, 90)): Repo(PlusTen)}}
    with use_kernel_mapping(mapping):
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU; see test_capability_is_read_per_device")
        kernelize(m, mode=Mode.INFERENCE, device="cuda")
        assert kernelized_layers(m) == {}
        with use_kernel_mapping({"Scale": {"cuda": Repo(PlusOne)}}):
            kernelize(m, mode=Mode.INFERENCE, device="cuda")
    assert set(kernelized_layers(m)) == {"0", "2"}


@pytest.mark.gpu
def test_capability_is_read_per_device():
    from hubkernels.layers.device import capability_of

    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        assert capability_of(torch.device("cuda", index)) == major * 10 + minor
    m = model().cuda()
    here = capability_of(torch.device("cuda", 0))
    mapping = {
        "Scale": {
            Device("cuda", CUDAProperties(here, here)): Repo(PlusOne),
            Device("cuda", CUDAProperties(0, here - 1)): Repo(PlusTen),
        }
    }
    with use_kernel_mapping(mapping):
        kernelize(m, mode=Mode.INFERENCE)
    assert torch.equal(m[0](X.cuda()), X.cuda() * 2 + 1)


def test_a_hook_added_after_kernelize_survives_a_second_kernelize():
    """accelerate's add_hook_to_module keeps the forward it wraps in `_old_forward`; a later kernelize
    (another mode) swaps the kernel there and keeps the hook."""
    m = model()
    calls = []
    with use_kernel_mapping({"Scale": {"cpu": {Mode.INFERENCE: Repo(PlusOne), Mode.TRAINING: Repo(PlusTen)}}}):
        kernelize(m, mode=Mode.INFERENCE)
        block = m[0]
        block._old_forward = block.forward

        def hooked(*args, **kwargs):
            calls.append(1)
            return block._old_forward(*args, **kwargs)

        block.forward = hooked
        assert torch.equal(block(X), X * 2 + 1)
        kernelize(m, mode=Mode.TRAINING)
        assert torch.equal(block(X), X * 2 + 10)
    assert len(calls) == 2


# -- against the real ltx-kernels build -------------------------------------------------------------------


def test_local_layer_repository_runs_the_built_kernel(ltx_build):
    root = ltx_build.path.parent.parent
    m = nn.Sequential(nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.RMSNorm(64, eps=1e-5))
    with torch.no_grad():
        m[2].weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 16)
    with torch.no_grad():
        ref = m(x)
        mapping = {
            LayerMatch(nn.GELU): {"cpu": LocalLayerRepository(root, layer_name="GeluTanh")},
            LayerMatch(nn.RMSNorm): {"cpu": LocalLayerRepository(root, layer_name="TorchRMSNorm")},
        }
        with use_kernel_mapping(mapping):
            kernelize(m, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        with torch.profiler.profile() as prof:
            out = m(x)
    assert {k: v.__name__ for k, v in kernelized_layers(m).items()} == {"1": "GeluTanh", "2": "TorchRMSNorm"}
    ran = {e.key.split("::")[-1] for e in prof.key_averages() if "::" in e.key and "ltx_kernels" in e.key}
    assert {"gelu_tanh", "rms_norm"} <= ran
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_a_missing_layer_names_the_layers_the_kernel_has(ltx_build):
    repo = LocalLayerRepository(ltx_build.path, layer_name="NoSuchLayer")
    with pytest.raises(LayerNotFoundError, match="NoSuchLayer.*it has: .*LlamaRMSNorm"):
        repo.load()


# -- prepare: work done once per module at kernelize time -------------------------------------------------


class LlamaMLP(nn.Module):
    """transformers' LlamaMLP: down(silu(gate(x)) * up(x)), with separate gate and up projections."""

    def __init__(self, hidden: int = 8, ff: int = 16) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ff, bias=False)
        self.up_proj = nn.Linear(hidden, ff, bias=False)
        self.down_proj = nn.Linear(ff, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


PREPARED: list[nn.Module] = []  # the modules StackedMLP.prepare ran on


class StackedMLP(nn.Module):
    """One matmul for gate and up, then silu_and_mul: the two weights are stacked once, by prepare, and the
    projections' weights become views of the stack (no second copy; load_state_dict writes through them)."""

    @classmethod
    def prepare(cls, module: nn.Module) -> None:
        PREPARED.append(module)
        gate, up = module.gate_proj.weight, module.up_proj.weight
        stacked = torch.cat([gate.detach(), up.detach()])
        module.register_buffer("gate_up_weight", stacked, persistent=False)
        gate.data, up.data = stacked[: gate.shape[0]], stacked[gate.shape[0] :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = (x @ self.gate_up_weight.T).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def test_a_layer_prepares_each_module_once_per_kernelize_and_unkernelize_undoes_it():
    torch.manual_seed(0)
    mlp, x = LlamaMLP(), torch.randn(3, 8)
    expected, state = mlp(x), mlp.state_dict()
    PREPARED.clear()
    mapping = {LayerMatch(LlamaMLP): {"cpu": Repo(StackedMLP)}}
    with use_kernel_mapping(mapping):
        kernelize(mlp, mode=Mode.INFERENCE)
    assert PREPARED == [mlp] and kernelized_layers(mlp) == {"": StackedMLP}
    torch.testing.assert_close(mlp(x), expected)
    mlp(x)
    assert PREPARED == [mlp], "prepare runs at kernelize time, not per forward"
    assert set(mlp.state_dict()) == set(state), "the stack is not saved with the model"
    assert mlp.gate_proj.weight.untyped_storage().data_ptr() == mlp.gate_up_weight.untyped_storage().data_ptr()
    # load_state_dict copies into the projections' weights, which are views of the stack: the stack follows
    other = LlamaMLP()
    mlp.load_state_dict(other.state_dict())
    torch.testing.assert_close(mlp(x), other(x))
    # assign=True replaces the weights: the stack is stale until kernelize prepares the module again
    third = LlamaMLP()
    mlp.load_state_dict(third.state_dict(), assign=True)
    assert not torch.allclose(mlp(x), third(x))
    with use_kernel_mapping(mapping):
        kernelize(mlp, mode=Mode.INFERENCE)
    assert PREPARED == [mlp, mlp] and len(dict(mlp.named_buffers())) == 1
    torch.testing.assert_close(mlp(x), third(x))
    other = third
    kernelize(mlp, mode=Mode.INFERENCE)  # no mapping any more: the original forward, the stack removed
    assert kernelized_layers(mlp) == {} and not hasattr(mlp, "gate_up_weight")
    assert "gate_up_weight" not in dict(mlp.named_buffers())
    torch.testing.assert_close(mlp(x), other(x))


class PrepareNotClassmethod(nn.Module):
    def prepare(self, module):  # type: ignore[no-untyped-def]
        pass

    def forward(self, x):
        return x


def test_prepare_must_be_a_classmethod():
    m = nn.Sequential(nn.GELU(approximate="tanh"))
    with (
        use_kernel_mapping({LayerMatch(nn.GELU): {"cpu": Repo(PrepareNotClassmethod)}}),
        pytest.raises(TypeError, match="prepare must be a classmethod"),
    ):
        kernelize(m, mode=Mode.INFERENCE, device="cpu")
