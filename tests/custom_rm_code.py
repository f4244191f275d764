"""An ArmoRM-shaped custom-code reward model: its output carries `.score`, not `.logits`."""

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaModel, PreTrainedModel
from transformers.utils import ModelOutput


class CustomRMConfig(LlamaConfig):
    model_type = "custom_rm"


@dataclass
class CustomRMOutput(ModelOutput):
    score: torch.FloatTensor = None


class CustomRM(PreTrainedModel):
    config_class = CustomRMConfig

    def __init__(self, config):
        super().__init__(config)
        self.model = LlamaModel(config)
        self.head = torch.nn.Linear(config.hidden_size, 1, bias=False)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        last = attention_mask.sum(-1) - 1
        return CustomRMOutput(score=self.head(hidden[torch.arange(len(hidden)), last]))
