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

/// The type of a new variable stored through `put_variable_learning`, until the run names it.
pub(crate) const TYPE_LEARNED_AT_RUN: &str = "<learned at run>";

/// Gives the path a cell can write for a type named by `std::any::type_name`, or `None`. The
/// second argument says whether a path is to a type the cells defined (`ctx::Scaled`): such a
/// type is written by its name.
pub type TypeNamer = fn(&str, &dyn Fn(&str) -> bool) -> Option<String>;

/// A cell whose code may make a closure (`|x| …`, `move ||`) keeps the placeholder: storing a
/// closure then fails to compile before the cell runs, with the message it has always had.
pub(crate) fn may_make_a_closure(code: &str) -> bool {
    code.contains('|')
}
