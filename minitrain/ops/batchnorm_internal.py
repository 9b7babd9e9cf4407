"""BatchNormInternal (com.microsoft): the training-mode BatchNormalization that ONNX Runtime's
gradient graphs hold in place of the ONNX op, with the same inputs, attributes and outputs
(Y, running_mean, running_var, saved_mean, saved_inv_std); BatchNormalizationGrad reads its
saved statistics.  Its element types are ONNX Runtime's: X and Y of T, scale and B of T1, the
statistics of T2."""
from .normalization import BN_ATTRS, batchnorm_inputs, infer_batchnorm
from .schema import MS_DOMAIN, schema

schema("BatchNormInternal", domain=MS_DOMAIN, inputs=batchnorm_inputs("T1", "T2"),
       outputs=["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"], attrs=BN_ATTRS,
       optional_outputs=("running_mean", "running_var", "saved_mean", "saved_inv_std"))(infer_batchnorm)
