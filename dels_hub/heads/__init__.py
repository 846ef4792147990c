from .configuration_local_head import DeLSLocalHeadConfig
from .modeling_local_head import DeLSLocalHead, LinearGRUCell
from .ngram_head import NGramHeadConfig, NGramLocalHead

__all__ = ["DeLSLocalHead", "DeLSLocalHeadConfig", "LinearGRUCell", "NGramHeadConfig", "NGramLocalHead"]
