;;; hodu-mode.el --- major mode for the Hodu tensor language  -*- lexical-binding: t; -*-

;; Highlighting, comments and indentation for .hodu files.
;; Install: put this file on `load-path' and (require 'hodu-mode).
;; tests/editors/check_grammars.sh checks that every keyword and builtin
;; of the language is listed here.

;;; Code:

(defgroup hodu nil "Hodu tensor scripting language." :group 'languages)

(defcustom hodu-indent-offset 4
  "Columns per indentation level in Hodu code."
  :type 'integer :group 'hodu)

(defconst hodu-keywords
  '(
    "if" "else" "for" "in" "while" "break" "continue" "return" "let" "fn"
    "class" "import" "as" "compiled" "script" "no_grad" "grad_context" "with_strategy" "and"
    "or" "not" "try" "catch" "throw")
  "Hodu keywords (lang/lexer.re).")

(defconst hodu-constants '("true" "false" "none")
  "Hodu constants.")

(defconst hodu-dtypes
  '(    "f16" "bf16" "f32" "f64" "i8" "u8" "i32" "i64" "bool")
  "Hodu dtype names.")

(defconst hodu-builtins
  '(
    "tensor" "zeros" "ones" "full" "rand" "randn" "randint" "bernoulli" "arange" "linspace" "eye"
    "zeros_like" "ones_like" "manual_seed" "set_default_device"
    "default_device" "abs" "exp" "log" "sqrt" "rsqrt" "sin" "cos" "tanh"
    "sigmoid" "relu" "gelu" "silu" "softplus" "sign" "floor" "ceil" "round"
    "maximum" "minimum" "pow" "where" "clamp" "sum" "mean" "max" "min" "prod"
    "var" "std" "argmax" "argmin" "logsumexp" "matmul" "dot" "outer"
    "transpose" "permute" "reshape" "expand" "flatten" "squeeze" "unsqueeze"
    "concat" "stack" "split" "one_hot" "softmax" "log_softmax" "cumsum" "cumprod" "argsort" "sort" "topk" "erf" "erfc" "atan2" "einsum" "grad" "vjp" "jvp" "hessian" "lgamma" "digamma" "polygamma" "multinomial" "diag" "diagonal" "trace"
    "cross_entropy" "mse" "conv2d" "max_pool2d" "avg_pool2d" "dropout"
    "layer_norm" "embedding" "save" "load" "read_csv" "param" "detach"
    "backward" "zero_grad" "clear_tape" "is_grad_enabled" "memory_stats"
    "set_strategy" "checkpoint" "empty_cache" "profile_report" "profile_stats"
    "reset_peak_memory_stats" "get_num_threads"
    "getattr" "setattr" "hasattr" "randperm" "isatty" "flush"
    "compiled_stats" "input" "output" "load_script" "print" "str" "repr"
    "type" "len" "range" "list" "int" "float" "args" "clock" "enumerate" "zip" "sorted" "reversed" "assert"
    "require" "gc"
    "isnan" "isinf" "isfinite" "nan_to_num" "isclose" "allclose" "any" "all" "tril"
    "triu" "flip" "roll" "tile" "norm"
    "masked_fill" "take_along_axis" "gather" "log1p" "expm1" "hypot" "Error" "super")
  "Hodu builtin functions.")

(defvar hodu-font-lock-keywords
  `((,(regexp-opt hodu-keywords 'symbols) . font-lock-keyword-face)
    (,(regexp-opt hodu-constants 'symbols) . font-lock-constant-face)
    (,(regexp-opt hodu-dtypes 'symbols) . font-lock-type-face)
    (,(concat (regexp-opt hodu-builtins 'symbols) "\\s-*(") 1 font-lock-builtin-face)
    ("\\_<fn\\s-+\\(\\(?:\\sw\\|\\s_\\)+\\)" 1 font-lock-function-name-face)
    ("\\_<class\\s-+\\(\\(?:\\sw\\|\\s_\\)+\\)" 1 font-lock-type-face)))

(defvar hodu-mode-syntax-table
  (let ((st (make-syntax-table)))
    (modify-syntax-entry ?# "<" st)
    (modify-syntax-entry ?\n ">" st)
    (modify-syntax-entry ?_ "_" st)
    (modify-syntax-entry ?\" "\"" st)
    (modify-syntax-entry ?' "\"" st)
    (modify-syntax-entry ?\\ "\\" st)
    st)
  "Syntax table for `hodu-mode'.")

(defun hodu-indent-line ()
  "Indent the current line by the depth of the brackets around it."
  (interactive)
  (let* ((depth (save-excursion (car (syntax-ppss (line-beginning-position)))))
         (closing (save-excursion
                    (back-to-indentation)
                    (looking-at "[]})]")))
         (col (* hodu-indent-offset (max 0 (- depth (if closing 1 0))))))
    (if (<= (current-column) (current-indentation))
        (indent-line-to col)
      (save-excursion (indent-line-to col)))))

;;;###autoload
(defun hodu-format-buffer ()
  "Rewrite the buffer in the canonical layout with `hodu fmt -'.
On a syntax error the buffer is left as it is and the error shown."
  (interactive)
  (let ((out (generate-new-buffer " *hodu fmt*"))
        (point (point)))
    (unwind-protect
        (if (zerop (call-process-region (point-min) (point-max) "hodu" nil
                                        (list out t) nil "fmt" "-"))
            (progn (replace-buffer-contents out)
                   (goto-char (min point (point-max))))
          (message "hodu fmt: %s" (with-current-buffer out (buffer-string))))
      (kill-buffer out))))

;;;###autoload
(define-derived-mode hodu-mode prog-mode "Hodu"
  "Major mode for Hodu programs."
  (setq-local comment-start "# ")
  (setq-local comment-start-skip "#+\\s-*")
  (setq-local font-lock-defaults '(hodu-font-lock-keywords))
  (setq-local indent-line-function #'hodu-indent-line))

;;;###autoload
(add-to-list 'auto-mode-alist '("\\.hodu\\'" . hodu-mode))

(provide 'hodu-mode)
;;; hodu-mode.el ends here
