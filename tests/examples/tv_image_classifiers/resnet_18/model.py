from torchvision.models.resnet import BasicBlock, ResNet


class ImageClassifier(ResNet):
    def __init__(self):
        super().__init__(BasicBlock, [2, 2, 2, 2])
