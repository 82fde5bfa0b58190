//! Tensors from Rust values: `Tensor::new(&[1.0, 2.0, 3.0])`, `tensor![[1, 2], [3, 4]]`.
//! Like `torch.tensor`, a tensor made this way lands on the default device (the CPU unless
//! `set_default_device` chose another) and Rust's literal types follow PyTorch's defaults.

use super::{IntoOptions, Tensor};
use crate::base::dtype::{DType, Element};
use crate::device::error::{Error, Result};

/// Rust values a tensor can be made from: a number, or slices, `Vec`s and arrays of them,
/// nested to any depth (`&[[f32; 3]; 2]` is a `[2, 3]` tensor).
pub trait TensorData {
    type Elem: Element;
    /// Appends the values in row-major order and returns their shape.
    fn flatten_into(&self, out: &mut Vec<Self::Elem>) -> Result<Vec<usize>>;
}

macro_rules! scalar_data {
    ($($t:ty),*) => {$(
        impl TensorData for $t {
            type Elem = $t;
            fn flatten_into(&self, out: &mut Vec<$t>) -> Result<Vec<usize>> {
                out.push(*self);
                Ok(Vec::new())
            }
        }
    )*};
}
scalar_data!(bool, u8, i32, i64, half::f16, half::bf16, f32, f64);

/// The rows of one level: each must have the shape of the first.
fn rows<D: TensorData>(items: &[D], out: &mut Vec<D::Elem>) -> Result<Vec<usize>> {
    let mut inner: Option<Vec<usize>> = None;
    for (i, item) in items.iter().enumerate() {
        let shape = item.flatten_into(out)?;
        match &inner {
            None => inner = Some(shape),
            Some(first) if *first != shape => {
                return Err(Error::invalid(
                    "Tensor::new",
                    format!(
                        "row {i} has shape {shape:?} but row 0 has shape {first:?}: a tensor is rectangular, so every row needs the same length"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    let mut shape = vec![items.len()];
    shape.extend(inner.unwrap_or_default());
    Ok(shape)
}

impl<D: TensorData> TensorData for [D] {
    type Elem = D::Elem;
    fn flatten_into(&self, out: &mut Vec<D::Elem>) -> Result<Vec<usize>> {
        rows(self, out)
    }
}

impl<D: TensorData, const N: usize> TensorData for [D; N] {
    type Elem = D::Elem;
    fn flatten_into(&self, out: &mut Vec<D::Elem>) -> Result<Vec<usize>> {
        rows(self, out)
    }
}

impl<D: TensorData> TensorData for Vec<D> {
    type Elem = D::Elem;
    fn flatten_into(&self, out: &mut Vec<D::Elem>) -> Result<Vec<usize>> {
        rows(self, out)
    }
}

impl<D: TensorData + ?Sized> TensorData for &D {
    type Elem = D::Elem;
    fn flatten_into(&self, out: &mut Vec<D::Elem>) -> Result<Vec<usize>> {
        (**self).flatten_into(out)
    }
}

/// The dtype `torch.tensor` would give these values: Rust's default literals (`1.0` is an f64,
/// `1` an i32) become PyTorch's defaults, f32 and i64; every other type is kept.
fn default_dtype(elem: DType) -> DType {
    match elem {
        DType::F64 => DType::F32,
        DType::I32 => DType::I64,
        other => other,
    }
}

impl Tensor {
    /// A tensor holding `data` on the default device (`torch.tensor`): `Tensor::new(&[1.0, 2.0])`
    /// is an f32 tensor of shape `[2]` on the CPU. Floats become f32 and integers i64 (as Python
    /// numbers do in PyTorch); `from_vec` keeps the Rust type instead, and `from_data` takes a
    /// device and dtype.
    pub fn new(data: impl TensorData) -> Result<Tensor> {
        Tensor::from_data(data, ())
    }

    /// `Tensor::new` with options: `Tensor::from_data(&[[1, 2], [3, 4]], (&device, DType::F32))`.
    pub fn from_data<D: TensorData>(data: D, opts: impl IntoOptions) -> Result<Tensor> {
        let mut values = Vec::new();
        let shape = data.flatten_into(&mut values)?;
        let o = opts.into_options();
        let dtype = o.dtype.unwrap_or(default_dtype(D::Elem::DTYPE));
        Tensor::from_vec(values, shape, (dtype, o.device))
    }
}

/// `tensor![1.0, 2.0, 3.0]` is `Tensor::new(&[1.0, 2.0, 3.0])`; rows nest
/// (`tensor![[1, 2], [3, 4]]`), and options follow a `;` (`tensor![1.0, 2.0; &device]`,
/// `tensor![1, 2; (DType::U8, &device)]`). Gives a `Result<Tensor>`.
#[macro_export]
macro_rules! tensor {
    ($($x:expr),+ $(,)? ; $opts:expr) => {
        $crate::Tensor::from_data([$($x),+], $opts)
    };
    ($($x:expr),+ $(,)?) => {
        $crate::Tensor::new([$($x),+])
    };
}

#[cfg(test)]
mod tests {
    use crate::base::dtype::DType;
    use crate::device::Device;
    use crate::tensor::Tensor;

    #[test]
    fn literals_follow_pytorch_defaults_and_land_on_the_cpu() {
        let t = Tensor::new([1.0, 2.0, 3.0]).unwrap();
        assert_eq!(
            (t.dtype(), t.shape(), t.device()),
            (DType::F32, &[3][..], Device::Cpu)
        );
        let m = crate::tensor![[1, 2, 3], [4, 5, 6]].unwrap();
        assert_eq!((m.dtype(), m.shape()), (DType::I64, &[2, 3][..]));
        assert_eq!(m.to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
        let kept = Tensor::new(vec![true, false]).unwrap();
        assert_eq!(kept.dtype(), DType::Bool);
        let chosen = crate::tensor![1.0, 2.0; DType::F64].unwrap();
        assert_eq!(chosen.dtype(), DType::F64);
        assert_eq!(Tensor::new(2.5).unwrap().shape(), &[] as &[usize]);
    }

    #[test]
    fn ragged_rows_are_an_error_that_says_which_row() {
        let e = Tensor::new(vec![vec![1.0, 2.0], vec![3.0]])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("row 1 has shape [1] but row 0 has shape [2]"),
            "{e}"
        );
    }
}
