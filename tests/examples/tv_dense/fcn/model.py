from torchvision.models._utils import IntermediateLayerGetter
from torchvision.models.resnet import Bottleneck, ResNet
from torchvision.models.segmentation.fcn import FCN, FCNHead


class FCNImageSegmenter(FCN):
    def __init__(self, num_classes=21):
        backbone = ResNet(Bottleneck, [3, 4, 6, 3], replace_stride_with_dilation=[False, True, True])
        backbone = IntermediateLayerGetter(backbone, return_layers={"layer4": "out", "layer3": "aux"})
        super().__init__(backbone, FCNHead(2048, num_classes), FCNHead(1024, num_classes))
