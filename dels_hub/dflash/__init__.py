from .configuration_dflash import DFlashConfig, build_target_layer_ids
from .modeling_dflash import DFlashDraftModel

__all__ = ["DFlashConfig", "DFlashDraftModel", "build_target_layer_ids"]
