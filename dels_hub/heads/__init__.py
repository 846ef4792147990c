from .configuration_local_head import DeLSLocalHeadConfig
from .modeling_local_head import DeLSLocalHead, LinearGRUCell

__all__ = ["DeLSLocalHead", "DeLSLocalHeadConfig", "LinearGRUCell"]
