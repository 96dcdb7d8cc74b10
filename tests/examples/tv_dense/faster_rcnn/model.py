from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.faster_rcnn import FasterRCNN
from torchvision.models.resnet import resnet50


class FRCNNObjectDetector(FasterRCNN):
    def __init__(self, num_classes=91, **kwargs):
        backbone = _resnet_fpn_extractor(resnet50(weights=None), trainable_layers=3)
        kwargs = {"min_size": 160, "max_size": 240, "rpn_post_nms_top_n_test": 200, **kwargs}
        super().__init__(backbone, num_classes, **kwargs)
