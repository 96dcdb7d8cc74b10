from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
from torchvision.models.detection.faster_rcnn import FasterRCNN


class FRCNNObjectDetector(FasterRCNN):
    def __init__(self, num_classes=91, **kwargs):
        backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None)
        kwargs = {"min_size": 160, "max_size": 240, "rpn_post_nms_top_n_test": 200, **kwargs}
        super().__init__(backbone, num_classes, **kwargs)
