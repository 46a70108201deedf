"""Integrations: Diffusers (layers a kernel declares for diffusers models), Transformers, and the config.json opt-in

`kernelize(model)` is `hubkernels.layers.kernelize` plus two things models need in practice: the
kernels a model's author declared in its config (`"hub_kernels"`, see docs/config-opt-in.md) and the
layer names of transformers' decorated layers when transformers could not mark them itself.
"""

from .config import from_pretrained, kernelize_with_config, mapping_from_config

#: `hubkernels.kernelize`: the config-aware kernelize (`hubkernels.layers.kernelize` is the plain one).
kernelize = kernelize_with_config

__all__ = ["from_pretrained", "kernelize", "kernelize_with_config", "mapping_from_config"]
