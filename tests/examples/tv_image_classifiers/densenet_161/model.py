import re

from torchvision.models.densenet import DenseNet

# torchvision's published DenseNet checkpoints name a dense layer's parts "norm.1", "conv.2", ...; the module
# names are now "norm1", "conv2": rename before loading, as the TorchServe example does.
OLD_NAME = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


class ImageClassifier(DenseNet):
    def __init__(self):
        super().__init__(48, (6, 12, 36, 24), 96)

    def load_state_dict(self, state_dict, strict=True):
        for key in list(state_dict.keys()):
            match = OLD_NAME.match(key)
            if match:
                state_dict[match.group(1) + match.group(2)] = state_dict.pop(key)
        return super().load_state_dict(state_dict, strict)
