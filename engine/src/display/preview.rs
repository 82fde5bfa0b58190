//! A tensor's values as PyTorch prints them: 4 decimals (or scientific notation when the
//! magnitudes call for it), aligned columns, and `...` past 1000 elements (3 at each edge).

use crate::base::dtype::DType;
use crate::tensor::Tensor;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;
const LINE_WIDTH: usize = 80;

/// The positions shown along a dimension of `size`, with `None` where `...` goes.
fn shown(size: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && size > 2 * EDGE {
        (0..EDGE)
            .map(Some)
            .chain([None])
            .chain((size - EDGE..size).map(Some))
            .collect()
    } else {
        (0..size).map(Some).collect()
    }
}

/// How every element is written, chosen once for the whole tensor as PyTorch's `_Formatter` does.
enum Style {
    Int,
    Bool,
    /// All finite values are integers: `1.`, `-2.`.
    WholeFloat,
    Fixed,
    Scientific,
}

fn style(dtype: DType, values: &[f64]) -> Style {
    if dtype == DType::Bool {
        return Style::Bool;
    }
    if !dtype.is_float() {
        return Style::Int;
    }
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.iter().all(|v| v.fract() == 0.0) {
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        return if max > 1e8 {
            Style::Scientific
        } else {
            Style::WholeFloat
        };
    }
    let nonzero: Vec<f64> = finite
        .iter()
        .map(|v| v.abs())
        .filter(|&v| v != 0.0)
        .collect();
    let max = nonzero.iter().fold(0.0f64, |m, &v| m.max(v));
    let min = nonzero.iter().fold(f64::INFINITY, |m, &v| m.min(v));
    if !nonzero.is_empty() && (max / min > 1000.0 || max > 1e8 || min < 1e-4) {
        Style::Scientific
    } else {
        Style::Fixed
    }
}

fn write_value(v: f64, style: &Style) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match style {
        Style::Bool => (v != 0.0).to_string(),
        Style::Int => format!("{}", v as i64),
        Style::WholeFloat => format!("{v:.0}."),
        Style::Fixed => format!("{v:.4}"),
        Style::Scientific => {
            // `1.2346e+05`, as PyTorch writes it.
            let s = format!("{v:.4e}");
            match s.split_once('e') {
                Some((m, e)) => {
                    let (sign, digits) = if let Some(d) = e.strip_prefix('-') {
                        ('-', d)
                    } else {
                        ('+', e)
                    };
                    format!("{m}e{sign}{digits:0>2}")
                }
                None => s,
            }
        }
    }
}

/// The values of `t`, formatted; `indent` is the column the first `[` sits at.
pub fn preview(t: &Tensor, indent: usize) -> String {
    let host = match t.host_readable() {
        Ok(host) => host,
        // A GPU's error found at this read (an index its kernel checked) is the user's to see.
        Err(e) => return format!("(values not shown: {e})"),
    };
    let shape = t.shape().to_vec();
    let summarize = t.numel() > THRESHOLD;
    let axes: Vec<Vec<Option<usize>>> = shape.iter().map(|&s| shown(s, summarize)).collect();
    // Read only the elements that are shown.
    let sel: Vec<Vec<usize>> = axes
        .iter()
        .map(|a| a.iter().flatten().copied().collect())
        .collect();
    let count: usize = sel.iter().map(Vec::len).product();
    let mut offsets = Vec::with_capacity(count);
    let l = host.layout();
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..count {
        offsets.push(
            l.offset
                + idx
                    .iter()
                    .enumerate()
                    .map(|(d, &i)| sel[d][i] * l.strides[d])
                    .sum::<usize>(),
        );
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < sel[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
    let values = host.storage().read_f64_at(&offsets);
    let st = style(t.dtype(), &values);
    let texts: Vec<String> = values.iter().map(|&v| write_value(v, &st)).collect();
    let width = texts.iter().map(|s| s.len()).max().unwrap_or(0);
    if shape.is_empty() {
        return texts.first().cloned().unwrap_or_default();
    }
    let strides: Vec<usize> = (0..sel.len())
        .map(|d| sel[d + 1..].iter().map(Vec::len).product())
        .collect();
    nested(&texts, &axes, &strides, 0, 0, indent, width)
}

fn nested(
    texts: &[String],
    axes: &[Vec<Option<usize>>],
    strides: &[usize],
    dim: usize,
    base: usize,
    indent: usize,
    width: usize,
) -> String {
    let mut k = 0; // position among the shown entries of this dim
    if dim + 1 == axes.len() {
        let items: Vec<String> = axes[dim]
            .iter()
            .map(|p| match p {
                Some(_) => {
                    let s = format!("{:>width$}", texts[base + k]);
                    k += 1;
                    s
                }
                None => " ...".into(),
            })
            .collect();
        // Wrap long rows at the line width, aligned under the first element.
        let per_line = ((LINE_WIDTH.saturating_sub(indent + 1)) / (width + 2)).max(1);
        let lines: Vec<String> = items.chunks(per_line).map(|c| c.join(", ")).collect();
        return format!(
            "[{}]",
            lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
        );
    }
    let parts: Vec<String> = axes[dim]
        .iter()
        .map(|p| match p {
            Some(_) => {
                let s = nested(
                    texts,
                    axes,
                    strides,
                    dim + 1,
                    base + k * strides[dim],
                    indent + 1,
                    width,
                );
                k += 1;
                s
            }
            None => "...".into(),
        })
        .collect();
    let sep = format!(
        ",{}{}",
        "\n".repeat(axes.len() - dim - 1),
        " ".repeat(indent + 1)
    );
    format!("[{}]", parts.join(&sep))
}
