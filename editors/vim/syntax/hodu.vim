" Vim syntax file for Hodu (.hodu). Install: copy syntax/ and ftdetect/
" into ~/.vim (or a package). tests/editors/check_grammars.sh checks that
" every keyword and builtin of the language is listed here.
if exists("b:current_syntax")
  finish
endif

syn keyword hoduControl if else for in while break continue return try catch throw
syn keyword hoduDecl let fn class import as compiled script no_grad
syn keyword hoduDecl grad_context with_strategy
syn keyword hoduConstant true false none
syn keyword hoduOperator and or not
syn keyword hoduDtype f16 bf16 f32 f64 i8 u8 i32 i64 bool
syn keyword hoduBuiltin tensor zeros ones full rand randn randint bernoulli arange linspace eye
syn keyword hoduBuiltin zeros_like ones_like manual_seed set_default_device
syn keyword hoduBuiltin default_device abs exp log sqrt rsqrt sin cos tanh
syn keyword hoduBuiltin sigmoid relu gelu silu softplus sign floor ceil round
syn keyword hoduBuiltin maximum minimum pow where clamp sum mean max min prod
syn keyword hoduBuiltin var std argmax argmin logsumexp matmul dot outer
syn keyword hoduBuiltin transpose permute reshape expand flatten squeeze
syn keyword hoduBuiltin unsqueeze concat stack split one_hot softmax
syn keyword hoduBuiltin log_softmax cross_entropy mse conv2d max_pool2d cumsum cumprod argsort sort topk erf erfc atan2 einsum grad vjp jvp hessian lgamma digamma polygamma multinomial diag diagonal trace
syn keyword hoduBuiltin avg_pool2d dropout layer_norm embedding save load
syn keyword hoduBuiltin read_csv param detach backward zero_grad clear_tape
syn keyword hoduBuiltin is_grad_enabled memory_stats getattr setattr hasattr
syn keyword hoduBuiltin set_strategy checkpoint empty_cache profile_report profile_stats
syn keyword hoduBuiltin reset_peak_memory_stats get_num_threads
syn keyword hoduBuiltin randperm isatty flush compiled_stats input output
syn keyword hoduBuiltin load_script print str repr type len range list int
syn keyword hoduBuiltin float args clock assert require gc enumerate zip sorted reversed
syn keyword hoduBuiltin isnan isinf isfinite nan_to_num isclose allclose any all tril triu flip roll tile norm
syn keyword hoduBuiltin masked_fill take_along_axis gather log1p expm1 hypot Error super

syn match  hoduComment "#.*$" contains=@Spell
syn region hoduString start=+"+ skip=+\\.+ end=+"+ end=+$+ contains=hoduEscape
syn match  hoduEscape +\\\(u{\x\+}\|.\)+ contained
syn region hoduFString start=+f"+ skip=+\\.+ end=+"+ end=+$+ contains=hoduEscape,hoduField
syn region hoduField start=+{+ end=+}+ contained contains=TOP
syn match  hoduEscape +{{\|}}+ contained
syn match  hoduString +'[^'\n]*'+
syn match  hoduNumber "\<0[xX]\x\+\(_\x\+\)*\>"
syn match  hoduNumber "\<\d\+\(_\d\+\)*\(\.\d\+\(_\d\+\)*\)\=\([eE][+-]\=\d\+\)\=\>"
syn match  hoduFunction "\(\<fn\s\+\)\@<=\h\w*"
syn match  hoduClass "\(\<class\s\+\)\@<=\h\w*"

hi def link hoduControl   Conditional
hi def link hoduDecl      Statement
hi def link hoduConstant  Constant
hi def link hoduOperator  Operator
hi def link hoduDtype     Type
hi def link hoduBuiltin   Function
hi def link hoduComment   Comment
hi def link hoduString    String
hi def link hoduFString   String
hi def link hoduEscape    SpecialChar
hi def link hoduNumber    Number
hi def link hoduFunction  Function
hi def link hoduClass     Structure

setlocal commentstring=#\ %s
let b:current_syntax = "hodu"
