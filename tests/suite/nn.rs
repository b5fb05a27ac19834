//! Tests of xform::nn and the digits data (being written).
