"""ctypes bindings of the NVIDIA libraries pycuda does not wrap: cuBLAS (cublas.py), cuDNN's
legacy convolution API (cudnn.py) and its backend graph API (cudnn_backend.py), and the
driver's CUDA Graph calls (graphs.py).  They speak in device pointers, descriptors and
handles; the kernels that use them live above this folder."""
