// placelab's patch: a new variable's type learned from the run, so that a cell with a new `let`
// compiles once.
//
// With `variable_types = "rustc"` a new variable used to be stored under a placeholder type:
// storing it failed to compile, rustc's error named the type, and the cell compiled again. With
// a type namer (`EvalContext::set_type_namer`), the cell stores it through a generic
// `put_variable_learning` instead, which writes `std::any::type_name` of it on the cell's
// stdout; the namer turns that into a path the next cell can write (it is the embedding
// program's: it knows its own crates' public paths; the cells' own types are written by name).
// Whatever the namer cannot name (a function item, a private type) is learned as before, by compiling the cell once more under the
// placeholder, without running it again. A cell that fails to compile this way is compiled
// again under the placeholder, so its errors read as they always have.

use ra_ap_syntax::AstNode;
use ra_ap_syntax::ast;

/// The type of a new variable stored through `put_variable_learning`, until the run names it.
pub(crate) const TYPE_LEARNED_AT_RUN: &str = "<learned at run>";

/// Gives the path a cell can write for a type named by `std::any::type_name`, or `None`. The
/// second argument says whether a path is to a type the cells defined (`ctx::Scaled`): such a
/// type is written by its name.
pub type TypeNamer = fn(&str, &dyn Fn(&str) -> bool) -> Option<String>;

/// A cell that may store a closure in a new variable keeps the placeholder: storing it then
/// fails to compile before the cell runs, with the message it has always had. That is a
/// top-level `let` with no type written whose value holds a closure (`|x| …`, `move ||`) that
/// may outlive it: not one a loop, a function that runs it, a method whose result is counted,
/// summed or collected, or any statement but a `let` takes. What this misses (a closure
/// returned by a function) is still refused, after the run, when rustc names its type.
pub(crate) fn may_make_a_closure(code: &str) -> bool {
    use ra_ap_syntax::ast::HasModuleItem;
    if !code.contains('|') {
        return false;
    }
    let wrapped = format!("fn cell() {{\n{code}\n}}");
    let file = ast::SourceFile::parse(&wrapped, crate::rust_analyzer::EDITION).tree();
    let Some(ast::Item::Fn(cell)) = file.items().next() else {
        return true;
    };
    let Some(statements) = cell.body().and_then(|b| b.stmt_list()) else {
        return true;
    };
    statements.statements().any(|statement| match statement {
        ast::Stmt::LetStmt(l) if l.ty().is_none() => l.initializer().is_some_and(|value| {
            value.syntax().text().contains_char('|') && may_keep_a_closure(&value)
        }),
        _ => false,
    })
}

/// Whether a value may hold a closure written in it: not when its last step reduces it to a
/// count, a sum, a collection or a number, or is a call that runs the closure.
fn may_keep_a_closure(value: &ast::Expr) -> bool {
    const REDUCING: &[&str] = &[
        "count",
        "sum",
        "product",
        "len",
        "collect",
        "item",
        "to_vec",
        "all",
        "any",
        "is_empty",
        "unwrap_or_default",
    ];
    const KEEPING: &[&str] = &[
        "new",
        "Some",
        "Ok",
        "Err",
        "from",
        "from_fn",
        "repeat_with",
        "successors",
        "once_with",
    ];
    match value {
        ast::Expr::MethodCallExpr(call) => !call
            .name_ref()
            .is_some_and(|name| REDUCING.contains(&&*name.text())),
        ast::Expr::TryExpr(t) => t.expr().is_none_or(|e| may_keep_a_closure(&e)),
        ast::Expr::ParenExpr(p) => p.expr().is_none_or(|e| may_keep_a_closure(&e)),
        ast::Expr::BlockExpr(b) => b
            .stmt_list()
            .and_then(|s| s.tail_expr())
            .is_some_and(|tail| may_keep_a_closure(&tail)),
        // A function that takes a closure and runs it (`profile(|| …)`, `no_grad(|| …)`) returns
        // its result; one that keeps it is a constructor (`Box::new`, `Some`) or makes an
        // iterator of it.
        ast::Expr::CallExpr(call) => call.expr().is_none_or(|callee| {
            let callee = callee.syntax().text().to_string();
            let last = callee.rsplit("::").next().unwrap_or(&callee).trim();
            KEEPING.contains(&last)
        }),
        ast::Expr::CastExpr(_) | ast::Expr::Literal(_) | ast::Expr::BinExpr(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::may_make_a_closure;

    #[test]
    fn only_a_closure_a_new_variable_may_keep_asks_for_the_placeholder() {
        for keeps in [
            "let add_one = |v: i32| v + 1;",
            "let evens = (0..3).map(|v| v * 2);",
            "let f = move || 1;",
            "let b = Box::new(|x: i32| x);",
            "let it = std::iter::from_fn(|| None::<i32>);",
            "let b = { let k = 2; move |x: i32| x * k };",
        ] {
            assert!(may_make_a_closure(keeps), "{keeps}");
        }
        for reduces in [
            "let n = 1;",
            "let n = v.iter().filter(|t| t.is_some()).count();",
            "let s: Vec<usize> = (0..9).map(|i| i * 2).collect();",
            "let total = { let scale = |t: f32| t * 2.0; scale(x) as f64 };",
            "let x = (0..3).map(|i| i as f32).sum::<f32>() as f64;",
            "for i in 0..3 { v.push(i); }\nlet k = v.iter().map(|t| t + 1).collect::<Vec<_>>();",
            "println!(\"{}\", v.iter().any(|t| *t > 1));",
            "let m = a || b;",
            "let p = profile(|| step());",
            "let (l, z) = autocast(DType::F16, || -> Result<(T, T)> { Ok((a, b)) })??;",
        ] {
            assert!(!may_make_a_closure(reduces), "{reduces}");
        }
    }
}
