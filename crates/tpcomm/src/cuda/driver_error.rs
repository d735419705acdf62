//! The library's error for a failed CUDA driver call made through cudarc.

/// Maps a cudarc driver error of `call` (the driver function's name) to
/// `Error::Cuda`.
pub(crate) fn cuda_err(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> crate::Error {
    move |e| crate::Error::Cuda {
        call: call.into(),
        detail: e.to_string(),
    }
}
