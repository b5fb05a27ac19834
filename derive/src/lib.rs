//! `#[derive(Tree)]`: implements xform's `Tree` trait (pytrees) for a user
//! struct or enum. Use it through the facade, `use xform::Tree;`, which
//! re-exports the trait and this derive under one name (as serde does with
//! `Serialize`).
//!
//! ```ignore
//! use xform::{Tensor, Tree};
//! use xform::nn::Activation;
//!
//! #[derive(Clone, Tree)]
//! struct Mlp {
//!     layers: Vec<(Tensor, Tensor)>,
//!     #[tree(static)]
//!     act: Activation,
//!     #[tree(static)]
//!     sizes: Vec<usize>,
//! }
//! ```
//!
//! The generated implementation is the one `impl_tree!` writes for the same
//! fields: leaves in field order, paths `.field` (`.0` for a tuple struct),
//! skeleton nodes named the same way, and `Map<T>` a
//! `BTreeMap<String, T>` keyed by leaf path.
//!
//! - `#[tree(static)]` on a field: the field is not a leaf, has no path and
//!   no skeleton node, and is cloned unchanged into every rebuilt tree, so
//!   transforms treat it as a constant (an activation choice, layer sizes).
//!   Its type needs `Clone`, not `Tree`. Where it is a concrete type that
//!   is also `PartialEq + Send + Sync + 'static`, its value is part of the
//!   tree's static values (`Tree::static_values`), which `jit` keys its
//!   cache on: a new value traces again, as JAX keys on a pytree's
//!   auxiliary data. Other static fields (another type, or one named by a
//!   type parameter) are carried uncompared, fixed at the first trace.
//! - Generic structs: each leaf field whose type mentions a type parameter
//!   gets a `FieldType: Tree` bound, each such static field a
//!   `FieldType: Clone` bound. `#[tree(bound = "T: Tree + Debug")]` on the
//!   type replaces the inferred bounds.
//! - Enums: each variant's fields are a node named after the variant
//!   (`.Variant.field`), so trees of different variants have different
//!   structures.
//! - `#[tree(crate = path)]` on the type names the crate the trait is
//!   reached through (default `::xform`; `xform_transforms` below the
//!   facade, `crate` inside xform itself). The path must have a `tree`
//!   module holding `Tree`, `Leaves`, `Skeleton`, `StaticValue`,
//!   `StaticProbe`, `StaticByEq`, `StaticOpaque` and `__Tensor`.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{format_ident, quote};
use std::collections::BTreeSet;
use syn::{
    parse_macro_input, parse_quote, Data, DeriveInput, Fields, Ident, LitStr, Member, Path, Type, WherePredicate,
};

/// Derives `xform::Tree` (see the crate documentation).
#[proc_macro_derive(Tree, attributes(tree))]
pub fn derive_tree(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// One field: how it is named in patterns and paths, and whether it is a leaf.
struct FieldInfo {
    member: Member,
    binding: Ident,
    segment: String,
    ty: Type,
    is_static: bool,
}

/// A struct body or an enum variant.
struct Body {
    /// `Self` or `Self::Variant`.
    path: TokenStream,
    /// The variant's path segment (`.Variant`), `None` for a struct.
    segment: Option<String>,
    fields: Vec<FieldInfo>,
}

struct ContainerAttrs {
    krate: Path,
    bound: Option<Vec<WherePredicate>>,
}

fn container_attrs(input: &DeriveInput) -> syn::Result<ContainerAttrs> {
    let mut attrs = ContainerAttrs { krate: parse_quote!(::xform), bound: None };
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let value = meta.value()?;
                attrs.krate = if value.peek(LitStr) { value.parse::<LitStr>()?.parse()? } else { value.parse()? };
                Ok(())
            } else if meta.path.is_ident("bound") {
                let s: LitStr = meta.value()?.parse()?;
                let preds =
                    s.parse_with(syn::punctuated::Punctuated::<WherePredicate, syn::Token![,]>::parse_terminated)?;
                attrs.bound = Some(preds.into_iter().collect());
                Ok(())
            } else {
                Err(meta.error("unknown #[tree] attribute on a type; expected `crate = path` or `bound = \"...\"`"))
            }
        })?;
    }
    Ok(attrs)
}

fn field_is_static(field: &syn::Field) -> syn::Result<bool> {
    let mut is_static = false;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("tree")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("static") {
                is_static = true;
                Ok(())
            } else {
                Err(meta.error("unknown #[tree] attribute on a field; expected `static`"))
            }
        })?;
    }
    Ok(is_static)
}

fn fields_of(fields: &Fields) -> syn::Result<Vec<FieldInfo>> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (member, segment) = match &f.ident {
                Some(id) => {
                    let name = id.to_string();
                    let name = name.strip_prefix("r#").unwrap_or(&name).to_string();
                    (Member::Named(id.clone()), format!(".{name}"))
                }
                None => (Member::Unnamed(i.into()), format!(".{i}")),
            };
            Ok(FieldInfo {
                member,
                binding: format_ident!("__xform_f{}", i),
                segment,
                ty: f.ty.clone(),
                is_static: field_is_static(f)?,
            })
        })
        .collect()
}

fn bodies(input: &DeriveInput) -> syn::Result<Vec<Body>> {
    match &input.data {
        Data::Struct(s) => Ok(vec![Body { path: quote!(Self), segment: None, fields: fields_of(&s.fields)? }]),
        Data::Enum(e) => e
            .variants
            .iter()
            .map(|v| {
                let name = &v.ident;
                Ok(Body { path: quote!(Self::#name), segment: Some(format!(".{name}")), fields: fields_of(&v.fields)? })
            })
            .collect(),
        Data::Union(u) => Err(syn::Error::new(u.union_token.span, "#[derive(Tree)] does not support unions")),
    }
}

/// True if `tokens` mention one of `params` (a type parameter's name).
fn mentions(tokens: TokenStream, params: &BTreeSet<String>) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(id) => params.contains(&id.to_string()),
        TokenTree::Group(g) => mentions(g.stream(), params),
        _ => false,
    })
}

/// `Self { a: binding, b: _ }`: binds the leaf fields, and the static ones
/// too when `all`.
fn pattern(body: &Body, all: bool) -> TokenStream {
    let path = &body.path;
    let entries = body.fields.iter().map(|f| {
        let (member, binding) = (&f.member, &f.binding);
        if all || !f.is_static {
            quote!(#member: #binding)
        } else {
            quote!(#member: _)
        }
    });
    quote!(#path { #(#entries,)* })
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let attrs = container_attrs(input)?;
    let bodies = bodies(input)?;
    let k = &attrs.krate;
    let tree = quote!(#k::tree::Tree);
    let skeleton = quote!(#k::tree::Skeleton);
    let name = &input.ident;

    let mut generics = input.generics.clone();
    let preds: Vec<WherePredicate> = match attrs.bound {
        Some(b) => b,
        None => {
            let params: BTreeSet<String> = input.generics.type_params().map(|p| p.ident.to_string()).collect();
            let mut seen = BTreeSet::new();
            let mut preds = Vec::new();
            for f in bodies.iter().flat_map(|b| &b.fields) {
                let ty = &f.ty;
                if params.is_empty()
                    || !mentions(quote!(#ty), &params)
                    || !seen.insert((quote!(#ty).to_string(), f.is_static))
                {
                    continue;
                }
                preds.push(if f.is_static { parse_quote!(#ty: ::std::clone::Clone) } else { parse_quote!(#ty: #tree) });
            }
            preds
        }
    };
    generics.make_where_clause().predicates.extend(preds);
    let (impl_g, ty_g, where_c) = generics.split_for_impl();

    let mut flatten_arms = Vec::new();
    let mut rebuild_arms = Vec::new();
    let mut paths_arms = Vec::new();
    let mut skeleton_arms = Vec::new();
    let mut static_arms = Vec::new();
    for body in &bodies {
        let leaf_fields: Vec<&FieldInfo> = body.fields.iter().filter(|f| !f.is_static).collect();
        let leaf_bindings: Vec<&Ident> = leaf_fields.iter().map(|f| &f.binding).collect();
        let segments: Vec<&String> = leaf_fields.iter().map(|f| &f.segment).collect();
        let (pat_leaves, pat_all, path) = (pattern(body, false), pattern(body, true), &body.path);

        flatten_arms.push(quote!(#pat_leaves => { #(#tree::flatten_into(#leaf_bindings, out);)* }));

        let rebuilt = body.fields.iter().map(|f| {
            let (member, binding) = (&f.member, &f.binding);
            if f.is_static {
                quote!(#member: ::std::clone::Clone::clone(#binding))
            } else {
                quote!(#member: #tree::rebuild(#binding, leaves))
            }
        });
        rebuild_arms.push(quote!(#pat_all => #path { #(#rebuilt,)* }));

        // A variant's fields live under its own node (`.Variant.field`).
        let prefix = match &body.segment {
            Some(seg) => quote!(&::std::format!("{}{}", prefix, #seg)),
            None => quote!(prefix),
        };
        paths_arms.push(quote!(#pat_leaves => {
            let prefix: &str = #prefix;
            #(#tree::leaf_paths(#leaf_bindings, &::std::format!("{}{}", prefix, #segments), out);)*
        }));

        let node = quote!(#skeleton::Node(::std::vec![
            #((::std::string::String::from(#segments), #tree::skeleton(#leaf_bindings)),)*
        ]));
        let node = match &body.segment {
            Some(seg) => quote!(#skeleton::Node(::std::vec![(::std::string::String::from(#seg), #node)])),
            None => node,
        };
        skeleton_arms.push(quote!(#pat_leaves => #node));

        // static fields by value (comparable when their type allows it),
        // leaf fields through their own static parts, in field order
        let statics = body.fields.iter().map(|f| {
            let binding = &f.binding;
            if f.is_static {
                quote!(out.push((&&#k::tree::StaticProbe(#binding)).static_value());)
            } else {
                quote!(#tree::static_values(#binding, out);)
            }
        });
        static_arms.push(quote!(#pat_all => { #(#statics)* }));
    }

    // An enum without variants has no value: every method matches `*self`
    // with no arms (a reference to one is not known to be uninhabited).
    let scrutinee = if bodies.is_empty() { quote!(*self) } else { quote!(self) };
    let t = Ident::new("__XformT", Span::call_site());
    Ok(quote! {
        #[automatically_derived]
        #[allow(unused_variables, clippy::all)]
        impl #impl_g #tree for #name #ty_g #where_c {
            type Map<#t> = ::std::collections::BTreeMap<::std::string::String, #t>;
            fn flatten_into(&self, out: &mut #k::tree::Leaves) {
                match #scrutinee { #(#flatten_arms)* }
            }
            fn rebuild(
                &self,
                leaves: &mut dyn ::std::iter::Iterator<Item = #k::tree::__Tensor>,
            ) -> Self {
                match #scrutinee { #(#rebuild_arms,)* }
            }
            fn build_map<#t>(
                &self,
                items: &mut dyn ::std::iter::Iterator<Item = #t>,
            ) -> Self::Map<#t> {
                #tree::paths(self)
                    .into_iter()
                    .map(|p| (p, items.next().expect("build_map: too few items")))
                    .collect()
            }
            fn leaf_paths(&self, prefix: &str, out: &mut ::std::vec::Vec<::std::string::String>) {
                match #scrutinee { #(#paths_arms)* }
            }
            fn skeleton(&self) -> #skeleton {
                match #scrutinee { #(#skeleton_arms,)* }
            }
            fn static_values<'__xform_a>(&'__xform_a self, out: &mut ::std::vec::Vec<#k::tree::StaticValue<'__xform_a>>) {
                #[allow(unused_imports)]
                use #k::tree::{StaticByEq as _, StaticOpaque as _};
                match #scrutinee { #(#static_arms)* }
            }
        }
    })
}
