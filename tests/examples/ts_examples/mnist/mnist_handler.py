from torchvision import transforms
from ts.torch_handler.image_classifier import ImageClassifier


class MNISTDigitClassifier(ImageClassifier):
    """A grayscale digit image in, the digit out (TorchServe's MNIST custom handler contract)."""

    image_processing = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])

    def postprocess(self, data):
        return data.argmax(1).tolist()
