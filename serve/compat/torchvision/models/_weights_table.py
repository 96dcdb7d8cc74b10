# ruff: noqa: E501  (a data table: one weights entry a line)
"""torchvision"s published classification weights, as facts: enum name, default member, and per member the URL
(whose file name the local torch hub cache holds), the eval transform"s settings, parameter count, minimum input
size, ImageNet-1K accuracy (acc@1, acc@5; None where torchvision reports none) and whether the weights carry the
ImageNet-1K categories (all but vgg16"s IMAGENET1K_FEATURES). Generated once from torchvision 0.28"s public enums.
"""

from typing import Any

# model: (enum class name, DEFAULT member,
#         [(member, url, transform settings, num_params, min_size, acc@1, acc@5, has categories)])
# fmt: off
WEIGHTS: dict[str, tuple[str, str, list[tuple[Any, ...]]]] = {
    "alexnet": ("AlexNet_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth", {"crop_size": 224}, 61100840, (63, 63), 56.522, 79.066, True),
    ]),
    "convnext_base": ("ConvNeXt_Base_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/convnext_base-6075fbad.pth", {"crop_size": 224, "resize_size": 232}, 88591464, (32, 32), 84.062, 96.87, True),
    ]),
    "convnext_large": ("ConvNeXt_Large_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/convnext_large-ea097f82.pth", {"crop_size": 224, "resize_size": 232}, 197767336, (32, 32), 84.414, 96.976, True),
    ]),
    "convnext_small": ("ConvNeXt_Small_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/convnext_small-0c510722.pth", {"crop_size": 224, "resize_size": 230}, 50223688, (32, 32), 83.616, 96.65, True),
    ]),
    "convnext_tiny": ("ConvNeXt_Tiny_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/convnext_tiny-983f1562.pth", {"crop_size": 224, "resize_size": 236}, 28589128, (32, 32), 82.52, 96.146, True),
    ]),
    "densenet121": ("DenseNet121_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/densenet121-a639ec97.pth", {"crop_size": 224}, 7978856, (29, 29), 74.434, 91.972, True),
    ]),
    "densenet161": ("DenseNet161_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/densenet161-8d451a50.pth", {"crop_size": 224}, 28681000, (29, 29), 77.138, 93.56, True),
    ]),
    "densenet169": ("DenseNet169_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/densenet169-b2777c0a.pth", {"crop_size": 224}, 14149480, (29, 29), 75.6, 92.806, True),
    ]),
    "densenet201": ("DenseNet201_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/densenet201-c1103571.pth", {"crop_size": 224}, 20013928, (29, 29), 76.896, 93.37, True),
    ]),
    "efficientnet_b0": ("EfficientNet_B0_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b0_rwightman-7f5810bc.pth", {"crop_size": 224, "resize_size": 256, "interpolation": "bicubic"}, 5288548, (1, 1), 77.692, 93.532, True),
    ]),
    "efficientnet_b1": ("EfficientNet_B1_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b1_rwightman-bac287d4.pth", {"crop_size": 240, "resize_size": 256, "interpolation": "bicubic"}, 7794184, (1, 1), 78.642, 94.186, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/efficientnet_b1-c27df63c.pth", {"crop_size": 240, "resize_size": 255, "interpolation": "bilinear"}, 7794184, (1, 1), 79.838, 94.934, True),
    ]),
    "efficientnet_b2": ("EfficientNet_B2_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b2_rwightman-c35c1473.pth", {"crop_size": 288, "resize_size": 288, "interpolation": "bicubic"}, 9109994, (1, 1), 80.608, 95.31, True),
    ]),
    "efficientnet_b3": ("EfficientNet_B3_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b3_rwightman-b3899882.pth", {"crop_size": 300, "resize_size": 320, "interpolation": "bicubic"}, 12233232, (1, 1), 82.008, 96.054, True),
    ]),
    "efficientnet_b4": ("EfficientNet_B4_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b4_rwightman-23ab8bcd.pth", {"crop_size": 380, "resize_size": 384, "interpolation": "bicubic"}, 19341616, (1, 1), 83.384, 96.594, True),
    ]),
    "efficientnet_b5": ("EfficientNet_B5_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b5_lukemelas-1a07897c.pth", {"crop_size": 456, "resize_size": 456, "interpolation": "bicubic"}, 30389784, (1, 1), 83.444, 96.628, True),
    ]),
    "efficientnet_b6": ("EfficientNet_B6_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b6_lukemelas-24a108a5.pth", {"crop_size": 528, "resize_size": 528, "interpolation": "bicubic"}, 43040704, (1, 1), 84.008, 96.916, True),
    ]),
    "efficientnet_b7": ("EfficientNet_B7_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_b7_lukemelas-c5b4e57e.pth", {"crop_size": 600, "resize_size": 600, "interpolation": "bicubic"}, 66347960, (1, 1), 84.122, 96.908, True),
    ]),
    "efficientnet_v2_l": ("EfficientNet_V2_L_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_v2_l-59c71312.pth", {"crop_size": 480, "resize_size": 480, "interpolation": "bicubic", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}, 118515272, (33, 33), 85.808, 97.788, True),
    ]),
    "efficientnet_v2_m": ("EfficientNet_V2_M_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_v2_m-dc08266a.pth", {"crop_size": 480, "resize_size": 480, "interpolation": "bilinear"}, 54139356, (33, 33), 85.112, 97.156, True),
    ]),
    "efficientnet_v2_s": ("EfficientNet_V2_S_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/efficientnet_v2_s-dd5fe13b.pth", {"crop_size": 384, "resize_size": 384, "interpolation": "bilinear"}, 21458488, (33, 33), 84.228, 96.878, True),
    ]),
    "googlenet": ("GoogLeNet_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/googlenet-1378be20.pth", {"crop_size": 224}, 6624904, (15, 15), 69.778, 89.53, True),
    ]),
    "inception_v3": ("Inception_V3_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/inception_v3_google-0cc3c7bd.pth", {"crop_size": 299, "resize_size": 342}, 27161264, (75, 75), 77.294, 93.45, True),
    ]),
    "maxvit_t": ("MaxVit_T_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/maxvit_t-bc5ab103.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 30919624, (224, 224), 83.7, 96.722, True),
    ]),
    "mnasnet0_5": ("MNASNet0_5_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mnasnet0.5_top1_67.823-3ffadce67e.pth", {"crop_size": 224}, 2218512, (1, 1), 67.734, 87.49, True),
    ]),
    "mnasnet0_75": ("MNASNet0_75_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mnasnet0_75-7090bc5f.pth", {"crop_size": 224, "resize_size": 232}, 3170208, (1, 1), 71.18, 90.496, True),
    ]),
    "mnasnet1_0": ("MNASNet1_0_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mnasnet1.0_top1_73.512-f206786ef8.pth", {"crop_size": 224}, 4383312, (1, 1), 73.456, 91.51, True),
    ]),
    "mnasnet1_3": ("MNASNet1_3_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mnasnet1_3-a4c69d6f.pth", {"crop_size": 224, "resize_size": 232}, 6282256, (1, 1), 76.506, 93.522, True),
    ]),
    "mobilenet_v2": ("MobileNet_V2_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mobilenet_v2-b0353104.pth", {"crop_size": 224}, 3504872, (1, 1), 71.878, 90.286, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/mobilenet_v2-7ebf99e0.pth", {"crop_size": 224, "resize_size": 232}, 3504872, (1, 1), 72.154, 90.822, True),
    ]),
    "mobilenet_v3_large": ("MobileNet_V3_Large_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mobilenet_v3_large-8738ca79.pth", {"crop_size": 224}, 5483032, (1, 1), 74.042, 91.34, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/mobilenet_v3_large-5c1a4163.pth", {"crop_size": 224, "resize_size": 232}, 5483032, (1, 1), 75.274, 92.566, True),
    ]),
    "mobilenet_v3_small": ("MobileNet_V3_Small_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/mobilenet_v3_small-047dcff4.pth", {"crop_size": 224}, 2542856, (1, 1), 67.668, 87.402, True),
    ]),
    "regnet_x_16gf": ("RegNet_X_16GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_16gf-2007eb11.pth", {"crop_size": 224}, 54278536, (1, 1), 80.058, 94.944, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_16gf-ba3796d7.pth", {"crop_size": 224, "resize_size": 232}, 54278536, (1, 1), 82.716, 96.196, True),
    ]),
    "regnet_x_1_6gf": ("RegNet_X_1_6GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_1_6gf-e3633e7f.pth", {"crop_size": 224}, 9190136, (1, 1), 77.04, 93.44, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_1_6gf-a12f2b72.pth", {"crop_size": 224, "resize_size": 232}, 9190136, (1, 1), 79.668, 94.922, True),
    ]),
    "regnet_x_32gf": ("RegNet_X_32GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_32gf-9d47f8d0.pth", {"crop_size": 224}, 107811560, (1, 1), 80.622, 95.248, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_32gf-6eb8fdc6.pth", {"crop_size": 224, "resize_size": 232}, 107811560, (1, 1), 83.014, 96.288, True),
    ]),
    "regnet_x_3_2gf": ("RegNet_X_3_2GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_3_2gf-f342aeae.pth", {"crop_size": 224}, 15296552, (1, 1), 78.364, 93.992, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_3_2gf-7071aa85.pth", {"crop_size": 224, "resize_size": 232}, 15296552, (1, 1), 81.196, 95.43, True),
    ]),
    "regnet_x_400mf": ("RegNet_X_400MF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_400mf-adf1edd5.pth", {"crop_size": 224}, 5495976, (1, 1), 72.834, 90.95, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_400mf-62229a5f.pth", {"crop_size": 224, "resize_size": 232}, 5495976, (1, 1), 74.864, 92.322, True),
    ]),
    "regnet_x_800mf": ("RegNet_X_800MF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_800mf-ad17e45c.pth", {"crop_size": 224}, 7259656, (1, 1), 75.212, 92.348, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_800mf-94a99ebd.pth", {"crop_size": 224, "resize_size": 232}, 7259656, (1, 1), 77.522, 93.826, True),
    ]),
    "regnet_x_8gf": ("RegNet_X_8GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_x_8gf-03ceed89.pth", {"crop_size": 224}, 39572648, (1, 1), 79.344, 94.686, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_x_8gf-2b70d774.pth", {"crop_size": 224, "resize_size": 232}, 39572648, (1, 1), 81.682, 95.678, True),
    ]),
    "regnet_y_128gf": ("RegNet_Y_128GF_Weights", "IMAGENET1K_SWAG_E2E_V1", [
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/regnet_y_128gf_swag-c8ce3e52.pth", {"crop_size": 384, "resize_size": 384, "interpolation": "bicubic"}, 644812894, (1, 1), 88.228, 98.682, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/regnet_y_128gf_lc_swag-cbe8ce12.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 644812894, (1, 1), 86.068, 97.844, True),
    ]),
    "regnet_y_16gf": ("RegNet_Y_16GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_16gf-9e6ed7dd.pth", {"crop_size": 224}, 83590140, (1, 1), 80.424, 95.24, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_16gf-3e4a00f9.pth", {"crop_size": 224, "resize_size": 232}, 83590140, (1, 1), 82.886, 96.328, True),
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/regnet_y_16gf_swag-43afe44d.pth", {"crop_size": 384, "resize_size": 384, "interpolation": "bicubic"}, 83590140, (1, 1), 86.012, 98.054, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/regnet_y_16gf_lc_swag-f3ec0043.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 83590140, (1, 1), 83.976, 97.244, True),
    ]),
    "regnet_y_1_6gf": ("RegNet_Y_1_6GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_1_6gf-b11a554e.pth", {"crop_size": 224}, 11202430, (1, 1), 77.95, 93.966, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_1_6gf-0d7bc02a.pth", {"crop_size": 224, "resize_size": 232}, 11202430, (1, 1), 80.876, 95.444, True),
    ]),
    "regnet_y_32gf": ("RegNet_Y_32GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_32gf-4dee3f7a.pth", {"crop_size": 224}, 145046770, (1, 1), 80.878, 95.34, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_32gf-8db6d4b5.pth", {"crop_size": 224, "resize_size": 232}, 145046770, (1, 1), 83.368, 96.498, True),
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/regnet_y_32gf_swag-04fdfa75.pth", {"crop_size": 384, "resize_size": 384, "interpolation": "bicubic"}, 145046770, (1, 1), 86.838, 98.362, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/regnet_y_32gf_lc_swag-e1583746.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 145046770, (1, 1), 84.622, 97.48, True),
    ]),
    "regnet_y_3_2gf": ("RegNet_Y_3_2GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_3_2gf-b5a9779c.pth", {"crop_size": 224}, 19436338, (1, 1), 78.948, 94.576, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_3_2gf-9180c971.pth", {"crop_size": 224, "resize_size": 232}, 19436338, (1, 1), 81.982, 95.972, True),
    ]),
    "regnet_y_400mf": ("RegNet_Y_400MF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_400mf-c65dace8.pth", {"crop_size": 224}, 4344144, (1, 1), 74.046, 91.716, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_400mf-e6988f5f.pth", {"crop_size": 224, "resize_size": 232}, 4344144, (1, 1), 75.804, 92.742, True),
    ]),
    "regnet_y_800mf": ("RegNet_Y_800MF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_800mf-1b27b58c.pth", {"crop_size": 224}, 6432512, (1, 1), 76.42, 93.136, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_800mf-58fc7688.pth", {"crop_size": 224, "resize_size": 232}, 6432512, (1, 1), 78.828, 94.502, True),
    ]),
    "regnet_y_8gf": ("RegNet_Y_8GF_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/regnet_y_8gf-d0d0e4a8.pth", {"crop_size": 224}, 39381472, (1, 1), 80.032, 95.048, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/regnet_y_8gf-dc2b1b54.pth", {"crop_size": 224, "resize_size": 232}, 39381472, (1, 1), 82.828, 96.33, True),
    ]),
    "resnet101": ("ResNet101_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnet101-63fe2227.pth", {"crop_size": 224}, 44549160, (1, 1), 77.374, 93.546, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/resnet101-cd907fc2.pth", {"crop_size": 224, "resize_size": 232}, 44549160, (1, 1), 81.886, 95.78, True),
    ]),
    "resnet152": ("ResNet152_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnet152-394f9c45.pth", {"crop_size": 224}, 60192808, (1, 1), 78.312, 94.046, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/resnet152-f82ba261.pth", {"crop_size": 224, "resize_size": 232}, 60192808, (1, 1), 82.284, 96.002, True),
    ]),
    "resnet18": ("ResNet18_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnet18-f37072fd.pth", {"crop_size": 224}, 11689512, (1, 1), 69.758, 89.078, True),
    ]),
    "resnet34": ("ResNet34_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnet34-b627a593.pth", {"crop_size": 224}, 21797672, (1, 1), 73.314, 91.42, True),
    ]),
    "resnet50": ("ResNet50_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnet50-0676ba61.pth", {"crop_size": 224}, 25557032, (1, 1), 76.13, 92.862, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/resnet50-11ad3fa6.pth", {"crop_size": 224, "resize_size": 232}, 25557032, (1, 1), 80.858, 95.434, True),
    ]),
    "resnext101_32x8d": ("ResNeXt101_32X8D_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnext101_32x8d-8ba56ff5.pth", {"crop_size": 224}, 88791336, (1, 1), 79.312, 94.526, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/resnext101_32x8d-110c445d.pth", {"crop_size": 224, "resize_size": 232}, 88791336, (1, 1), 82.834, 96.228, True),
    ]),
    "resnext101_64x4d": ("ResNeXt101_64X4D_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnext101_64x4d-173b62eb.pth", {"crop_size": 224, "resize_size": 232}, 83455272, (1, 1), 83.246, 96.454, True),
    ]),
    "resnext50_32x4d": ("ResNeXt50_32X4D_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/resnext50_32x4d-7cdf4587.pth", {"crop_size": 224}, 25028904, (1, 1), 77.618, 93.698, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/resnext50_32x4d-1a0047aa.pth", {"crop_size": 224, "resize_size": 232}, 25028904, (1, 1), 81.198, 95.34, True),
    ]),
    "shufflenet_v2_x0_5": ("ShuffleNet_V2_X0_5_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/shufflenetv2_x0.5-f707e7126e.pth", {"crop_size": 224}, 1366792, (1, 1), 60.552, 81.746, True),
    ]),
    "shufflenet_v2_x1_0": ("ShuffleNet_V2_X1_0_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/shufflenetv2_x1-5666bf0f80.pth", {"crop_size": 224}, 2278604, (1, 1), 69.362, 88.316, True),
    ]),
    "shufflenet_v2_x1_5": ("ShuffleNet_V2_X1_5_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/shufflenetv2_x1_5-3c479a10.pth", {"crop_size": 224, "resize_size": 232}, 3503624, (1, 1), 72.996, 91.086, True),
    ]),
    "shufflenet_v2_x2_0": ("ShuffleNet_V2_X2_0_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/shufflenetv2_x2_0-8be3c8ee.pth", {"crop_size": 224, "resize_size": 232}, 7393996, (1, 1), 76.23, 93.006, True),
    ]),
    "squeezenet1_0": ("SqueezeNet1_0_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/squeezenet1_0-b66bff10.pth", {"crop_size": 224}, 1248424, (21, 21), 58.092, 80.42, True),
    ]),
    "squeezenet1_1": ("SqueezeNet1_1_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/squeezenet1_1-b8a52dc0.pth", {"crop_size": 224}, 1235496, (17, 17), 58.178, 80.624, True),
    ]),
    "swin_b": ("Swin_B_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_b-68c6b09e.pth", {"crop_size": 224, "resize_size": 238, "interpolation": "bicubic"}, 87768224, (224, 224), 83.582, 96.64, True),
    ]),
    "swin_s": ("Swin_S_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_s-5e29d889.pth", {"crop_size": 224, "resize_size": 246, "interpolation": "bicubic"}, 49606258, (224, 224), 83.196, 96.36, True),
    ]),
    "swin_t": ("Swin_T_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_t-704ceda3.pth", {"crop_size": 224, "resize_size": 232, "interpolation": "bicubic"}, 28288354, (224, 224), 81.474, 95.776, True),
    ]),
    "swin_v2_b": ("Swin_V2_B_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_v2_b-781e5279.pth", {"crop_size": 256, "resize_size": 272, "interpolation": "bicubic"}, 87930848, (256, 256), 84.112, 96.864, True),
    ]),
    "swin_v2_s": ("Swin_V2_S_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_v2_s-637d8ceb.pth", {"crop_size": 256, "resize_size": 260, "interpolation": "bicubic"}, 49737442, (256, 256), 83.712, 96.816, True),
    ]),
    "swin_v2_t": ("Swin_V2_T_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/swin_v2_t-b137f0e2.pth", {"crop_size": 256, "resize_size": 260, "interpolation": "bicubic"}, 28351570, (256, 256), 82.072, 96.132, True),
    ]),
    "vgg11": ("VGG11_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg11-8a719046.pth", {"crop_size": 224}, 132863336, (32, 32), 69.02, 88.628, True),
    ]),
    "vgg11_bn": ("VGG11_BN_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg11_bn-6002323d.pth", {"crop_size": 224}, 132868840, (32, 32), 70.37, 89.81, True),
    ]),
    "vgg13": ("VGG13_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg13-19584684.pth", {"crop_size": 224}, 133047848, (32, 32), 69.928, 89.246, True),
    ]),
    "vgg13_bn": ("VGG13_BN_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg13_bn-abd245e5.pth", {"crop_size": 224}, 133053736, (32, 32), 71.586, 90.374, True),
    ]),
    "vgg16": ("VGG16_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg16-397923af.pth", {"crop_size": 224}, 138357544, (32, 32), 71.592, 90.382, True),
        ("IMAGENET1K_FEATURES", "https://download.pytorch.org/models/vgg16_features-amdegroot-88682ab5.pth", {"crop_size": 224, "mean": (0.48235, 0.45882, 0.40784), "std": (0.00392156862745098, 0.00392156862745098, 0.00392156862745098)}, 138357544, (32, 32), None, None, False),
    ]),
    "vgg16_bn": ("VGG16_BN_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg16_bn-6c64b313.pth", {"crop_size": 224}, 138365992, (32, 32), 73.36, 91.516, True),
    ]),
    "vgg19": ("VGG19_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg19-dcbb9e9d.pth", {"crop_size": 224}, 143667240, (32, 32), 72.376, 90.876, True),
    ]),
    "vgg19_bn": ("VGG19_BN_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vgg19_bn-c79401a0.pth", {"crop_size": 224}, 143678248, (32, 32), 74.218, 91.842, True),
    ]),
    "vit_b_16": ("ViT_B_16_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vit_b_16-c867db91.pth", {"crop_size": 224}, 86567656, (224, 224), 81.072, 95.318, True),
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/vit_b_16_swag-9ac1b537.pth", {"crop_size": 384, "resize_size": 384, "interpolation": "bicubic"}, 86859496, (384, 384), 85.304, 97.65, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/vit_b_16_lc_swag-4e70ced5.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 86567656, (224, 224), 81.886, 96.18, True),
    ]),
    "vit_b_32": ("ViT_B_32_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vit_b_32-d86f8d99.pth", {"crop_size": 224}, 88224232, (224, 224), 75.912, 92.466, True),
    ]),
    "vit_h_14": ("ViT_H_14_Weights", "IMAGENET1K_SWAG_E2E_V1", [
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/vit_h_14_swag-80465313.pth", {"crop_size": 518, "resize_size": 518, "interpolation": "bicubic"}, 633470440, (518, 518), 88.552, 98.694, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/vit_h_14_lc_swag-c1eb923e.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 632045800, (224, 224), 85.708, 97.73, True),
    ]),
    "vit_l_16": ("ViT_L_16_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vit_l_16-852ce7e3.pth", {"crop_size": 224, "resize_size": 242}, 304326632, (224, 224), 79.662, 94.638, True),
        ("IMAGENET1K_SWAG_E2E_V1", "https://download.pytorch.org/models/vit_l_16_swag-4f3808c9.pth", {"crop_size": 512, "resize_size": 512, "interpolation": "bicubic"}, 305174504, (512, 512), 88.064, 98.512, True),
        ("IMAGENET1K_SWAG_LINEAR_V1", "https://download.pytorch.org/models/vit_l_16_lc_swag-4d563306.pth", {"crop_size": 224, "resize_size": 224, "interpolation": "bicubic"}, 304326632, (224, 224), 85.146, 97.422, True),
    ]),
    "vit_l_32": ("ViT_L_32_Weights", "IMAGENET1K_V1", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/vit_l_32-c7638314.pth", {"crop_size": 224}, 306535400, (224, 224), 76.972, 93.07, True),
    ]),
    "wide_resnet101_2": ("Wide_ResNet101_2_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/wide_resnet101_2-32ee1156.pth", {"crop_size": 224}, 126886696, (1, 1), 78.848, 94.284, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/wide_resnet101_2-d733dc28.pth", {"crop_size": 224, "resize_size": 232}, 126886696, (1, 1), 82.51, 96.02, True),
    ]),
    "wide_resnet50_2": ("Wide_ResNet50_2_Weights", "IMAGENET1K_V2", [
        ("IMAGENET1K_V1", "https://download.pytorch.org/models/wide_resnet50_2-95faca4d.pth", {"crop_size": 224}, 68883240, (1, 1), 78.468, 94.086, True),
        ("IMAGENET1K_V2", "https://download.pytorch.org/models/wide_resnet50_2-9ba9bcbe.pth", {"crop_size": 224, "resize_size": 232}, 68883240, (1, 1), 81.602, 95.758, True),
    ]),
}
# fmt: on
