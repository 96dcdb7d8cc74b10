from torchvision.models.vgg import VGG, cfgs, make_layers


class ImageClassifier(VGG):
    def __init__(self):
        super().__init__(make_layers(cfgs["A"], False), **{"init_weights": False})
