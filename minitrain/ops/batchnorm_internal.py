"""BatchNormInternal (com.microsoft): the training-mode BatchNormalization that ONNX Runtime's
gradient graphs hold in place of the ONNX op, with the same inputs, attributes and outputs
(Y, running_mean, running_var, saved_mean, saved_inv_std); BatchNormalizationGrad reads its
saved statistics."""
from .normalization import BN_ATTRS, infer_batchnorm
from .schema import MS_DOMAIN, schema

schema("BatchNormInternal", domain=MS_DOMAIN, inputs=["X", "scale", "B", "input_mean", "input_var"],
       outputs=["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"], attrs=BN_ATTRS,
       optional_outputs=("running_mean", "running_var", "saved_mean", "saved_inv_std"))(infer_batchnorm)
