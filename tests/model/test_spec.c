/*
 * test_spec.c: the model spec parser: the example models, shapes and
 * parameter counts, and every kind of mistake reported as file:line:col with
 * the offending text.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <cltrain.h>

#include "model/layer.h"
#include "model/model.h"

#ifndef SRCDIR
#define SRCDIR "."
#endif

START_TEST(example_models_parse) {
  clt_model *m;
  ck_assert_msg(clt_model_load(SRCDIR "/examples/fashion_mlp.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_layer_count(m), 6);
  ck_assert_int_eq(clt_model_param_count(m), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  ck_assert_int_eq(clt_model_input_size(m), 784);
  ck_assert_int_eq(clt_model_num_classes(m), 10);
  clt_model_destroy(m);

  ck_assert_msg(clt_model_load(SRCDIR "/examples/fashion_cnn.model", &m) == 0, "%s", clt_last_error());
  int64_t want = (32 * 1 * 9 + 32) + (64 * 32 * 9 + 64) + (64 * 7 * 7 * 128 + 128) + (128 * 10 + 10);
  ck_assert_int_eq(clt_model_param_count(m), want);
  ck_assert_int_eq(clt_model_input_size(m), 784);
  char *summary;
  ck_assert_int_eq(clt_model_summary(m, &summary), 0);
  ck_assert_ptr_nonnull(strstr(summary, "(64, 7, 7)"));
  ck_assert_ptr_nonnull(strstr(summary, "(3136)"));
  ck_assert_ptr_nonnull(strstr(summary, "conv2d 32 k3 s1 p1"));
  free(summary);
  ck_assert_ptr_nonnull(strstr(clt_model_text(m), "conv2d 64 kernel=3 pad=1"));
  clt_model_destroy(m);
  clt_model_destroy(NULL);
}
END_TEST

START_TEST(options_comments_and_shapes) {
  clt_model *m;
  const char *text = "  # leading comment\n"
                     "INPUT 3 32 32   # case does not matter\n"
                     "\n"
                     "conv2d 8 kernel=5 stride=2 pad=2 bias=false init=xavier\n"
                     "leakyrelu 0.2\n"
                     "avgpool 2 stride=1\n"
                     "globalavgpool\n"
                     "layernorm eps=1e-6\n"
                     "gelu\n"
                     "linear 4 bias=no\n";
  ck_assert_msg(clt_model_parse(text, "t.model", &m) == 0, "%s", clt_last_error());
  /* conv: (32 + 4 - 5) / 2 + 1 = 16; avgpool 2 stride 1: 15 */
  char *summary;
  clt_model_summary(m, &summary);
  ck_assert_ptr_nonnull(strstr(summary, "(8, 16, 16)"));
  ck_assert_ptr_nonnull(strstr(summary, "(8, 15, 15)"));
  free(summary);
  ck_assert_int_eq(clt_model_param_count(m), 8 * 3 * 25 + 8 + 8 + 8 * 4);
  clt_model_destroy(m);
}
END_TEST

/* conv1d and conv3d: output shapes with stride, padding and dilation, their
 * weights as PyTorch's (out, in, k...), act=, the 1-D and 3-D pools, and
 * conv2d's dilation=. */
START_TEST(volume_layers_parse) {
  clt_model *m;
  const char *text = "input 2 6 8 10\n"
                     "conv3d 4 kernel=3 pad=1 act=relu\n"            /* (4, 6, 8, 10) */
                     "conv3d 5 kernel=3 stride=2 dilation=2 pad=2\n" /* (8 + 4 - 5) / 2 + 1 = 4: (5, 3, 4, 5) */
                     "maxpool3d 2 stride=1\n"                        /* (5, 2, 3, 4) */
                     "avgpool3d 2\n"                                 /* (5, 1, 1, 2) */
                     "flatten\nlinear 3\nloss mse\n";
  ck_assert_msg(clt_model_parse(text, "v.model", &m) == 0, "%s", clt_last_error());
  char *summary;
  clt_model_summary(m, &summary);
  ck_assert_ptr_nonnull(strstr(summary, "(4, 6, 8, 10)"));
  ck_assert_ptr_nonnull(strstr(summary, "conv3d 5 k3 s2 p2 d2"));
  ck_assert_ptr_nonnull(strstr(summary, "(5, 3, 4, 5)"));
  ck_assert_ptr_nonnull(strstr(summary, "(5, 2, 3, 4)"));
  ck_assert_ptr_nonnull(strstr(summary, "(5, 1, 1, 2)"));
  free(summary);
  ck_assert_int_eq(clt_model_param_count(m), (4 * 2 * 27 + 4) + (5 * 4 * 27 + 5) + (10 * 3 + 3));
  clt_model_destroy(m);
  text = "input 3 20\nconv1d 8 kernel=5 pad=4 dilation=2 bias=false\n" /* (20 + 8 - 9) + 1 = 20 */
         "maxpool1d 2\nconv1d 4 kernel=3 stride=2\navgpool1d 2 stride=1\nflatten\nlinear 2\nloss mse\n";
  ck_assert_msg(clt_model_parse(text, "v.model", &m) == 0, "%s", clt_last_error());
  clt_model_summary(m, &summary);
  ck_assert_ptr_nonnull(strstr(summary, "(8, 20)"));
  ck_assert_ptr_nonnull(strstr(summary, "(8, 10)"));
  ck_assert_ptr_nonnull(strstr(summary, "(4, 4)")); /* (10 - 3) / 2 + 1 */
  ck_assert_ptr_nonnull(strstr(summary, "(4, 3)"));
  free(summary);
  ck_assert_int_eq(clt_model_param_count(m), 8 * 3 * 5 + (4 * 8 * 3 + 4) + (2 * 12 + 2));
  clt_model_destroy(m);
  text = "input 1 9 9\nconv2d 2 kernel=3 dilation=4\nflatten\nlinear 2\nloss mse\n"; /* 9 - 9 + 1 = 1 */
  ck_assert_msg(clt_model_parse(text, "v.model", &m) == 0, "%s", clt_last_error());
  clt_model_summary(m, &summary);
  ck_assert_ptr_nonnull(strstr(summary, "(2, 1, 1)"));
  free(summary);
  clt_model_destroy(m);
}
END_TEST

/* Transformers: blocks repeat their lines, residuals connect, the output
 * projection shares the embedding's weight (counted once). */
START_TEST(gpt_models_parse) {
  clt_model *m;
  ck_assert_msg(clt_model_load(SRCDIR "/examples/gpt2_124m.model", &m) == 0, "%s", clt_last_error());
  /* GPT-2 small's published parameter count */
  ck_assert_int_eq(clt_model_param_count(m), 124439808);
  ck_assert_int_eq(clt_model_num_classes(m), 50257);
  ck_assert_int_eq(clt_model_input_size(m), 1024);
  /* input, embedding, posembedding, 12 x 8 block layers (act=gelu is one), layernorm, linear */
  ck_assert_int_eq(clt_model_layer_count(m), 3 + 12 * 8 + 2);
  clt_model_destroy(m);

  ck_assert_msg(clt_model_load(SRCDIR "/examples/gpt_tiny.model", &m) == 0, "%s", clt_last_error());
  int64_t C = 128, V = 256, T = 128, block = 2 * (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) +
                                           (4 * C * C + C);
  ck_assert_int_eq(clt_model_param_count(m), V * C + T * C + 2 * block + 2 * C);
  char *summary;
  ck_assert_int_eq(clt_model_summary(m, &summary), 0);
  ck_assert_ptr_nonnull(strstr(summary, "(128, 512)"));
  ck_assert_ptr_nonnull(strstr(summary, "tied"));
  free(summary);
  clt_model_destroy(m);

  /* A residual right at the start of a block adds the block's input; nested
   * blocks repeat their inner lines. */
  const char *nested = "input 16\n"
                       "block repeat=2\n"
                       "  block repeat=3\n"
                       "    linear 16\n"
                       "    relu\n"
                       "    residual\n"
                       "  end\n"
                       "  layernorm\n"
                       "end\n"
                       "linear 4\n";
  ck_assert_msg(clt_model_parse(nested, "n.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_layer_count(m), 1 + 2 * (3 * 3 + 1) + 1);
  ck_assert_int_eq(clt_model_param_count(m), 2 * (3 * (16 * 16 + 16) + 32) + 16 * 4 + 4);
  clt_model_destroy(m);

  /* act=NAME is the activation as the next layer, at the same line. */
  clt_model *a, *b;
  ck_assert_msg(clt_model_parse("input 1 8 8\nconv2d 4 kernel=3 act=relu\nflatten\nlinear 8 act=leakyrelu\nlinear 2\n",
                                "a.model", &a) == 0, "%s", clt_last_error());
  ck_assert_msg(clt_model_parse("input 1 8 8\nconv2d 4 kernel=3\nrelu\nflatten\nlinear 8\nleakyrelu\nlinear 2\n",
                                "b.model", &b) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_layer_count(a), 7);
  ck_assert_int_eq(clt_model_layer_count(a), clt_model_layer_count(b));
  ck_assert_int_eq(clt_model_param_count(a), clt_model_param_count(b));
  char *sa, *sb;
  ck_assert_int_eq(clt_model_summary(a, &sa), 0);
  ck_assert_int_eq(clt_model_summary(b, &sb), 0);
  ck_assert_ptr_nonnull(strstr(sa, "\n2     relu"));
  ck_assert_ptr_nonnull(strstr(sa, "leakyrelu 0.01"));
  ck_assert_ptr_nonnull(strstr(sb, "leakyrelu 0.01"));
  free(sa);
  free(sb);
  clt_model_destroy(a);
  clt_model_destroy(b);
}
END_TEST

/* A `loss` line after the last layer: the default stays cross-entropy;
 * regression takes one float target per output value, whatever its shape. */
START_TEST(loss_lines_parse) {
  clt_model *m;
  ck_assert_msg(clt_model_parse("input 784\nlinear 10\n", "c.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_loss(m), CLT_LOSS_CROSSENTROPY);
  ck_assert_int_eq(clt_model_num_classes(m), 10);
  ck_assert_int_eq(clt_model_labels_per_sample(m), 1);
  ck_assert(isnan(clt_model_huber_delta(m)));
  clt_model_destroy(m);
  ck_assert_msg(clt_model_parse("input 784\nlinear 10\nloss CrossEntropy # explicit\n", "c.model", &m) == 0, "%s",
                clt_last_error());
  ck_assert_int_eq(clt_model_loss(m), CLT_LOSS_CROSSENTROPY);
  ck_assert_int_eq(clt_model_num_classes(m), 10);
  clt_model_destroy(m);

  ck_assert_msg(clt_model_parse("input 8\nlinear 16\ntanh\nlinear 3\nloss mse\n", "r.model", &m) == 0, "%s",
                clt_last_error());
  ck_assert_int_eq(clt_model_loss(m), CLT_LOSS_MSE);
  ck_assert_int_eq(clt_model_num_classes(m), 0);
  ck_assert_int_eq(clt_model_labels_per_sample(m), 3);
  char *summary;
  ck_assert_int_eq(clt_model_summary(m, &summary), 0);
  ck_assert_msg(strstr(summary, "regression, 3 targets per sample, loss mse"), "%s", summary);
  free(summary);
  clt_model_destroy(m);

  /* a single output, and an image-shaped one */
  ck_assert_msg(clt_model_parse("input 8\nlinear 1\nloss l1\n", "r.model", &m) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt_model_loss(m), CLT_LOSS_L1);
  ck_assert_int_eq(clt_model_labels_per_sample(m), 1);
  clt_model_destroy(m);
  ck_assert_msg(clt_model_parse("input 2 6 6\nconv2d 3 kernel=3 pad=1\n\nloss huber delta=0.5\n", "r.model", &m) == 0,
                "%s", clt_last_error());
  ck_assert_int_eq(clt_model_loss(m), CLT_LOSS_HUBER);
  ck_assert(clt_model_huber_delta(m) == 0.5);
  ck_assert_int_eq(clt_model_labels_per_sample(m), 3 * 6 * 6);
  clt_model_destroy(m);
  ck_assert_msg(clt_model_parse("input 8\nlinear 2\nloss huber\n", "r.model", &m) == 0, "%s", clt_last_error());
  ck_assert(clt_model_huber_delta(m) == 1.0);
  clt_model_destroy(m);
  ck_assert_str_eq(clt_loss_name(CLT_LOSS_HUBER), "huber");
  ck_assert_ptr_null(clt_loss_name((clt_loss_kind)7));
}
END_TEST

/* Each bad spec, the file:line:col it must report and a fragment of the
 * message that names the offending text. */
static const struct {
  const char *text, *where, *what;
} bad[] = {
    {"input 784\nlinar 10\n", "t.model:2:1:", "unknown layer 'linar'"},
    {"input 784\nlinear\n", "t.model:2:7:", "linear needs the number of output features"},
    {"input 784\nlinear ten\n", "t.model:2:8:", "not 'ten'"},
    {"input 784\nlinear 10x\n", "t.model:2:8:", "not '10x'"},
    {"input 784\nlinear 0\n", "t.model:2:8:", "from 1 to"},
    {"input 784\nlinear 10 20\n", "t.model:2:11:", "unexpected '20'"},
    {"input 784\nlinear 10 bais=false\n", "t.model:2:11:", "unknown option 'bais' for linear"},
    {"input 784\nlinear 10 bias=maybe\n", "t.model:2:16:", "true or false, not 'maybe'"},
    {"input 1 28 28\nconv2d 8 kernel=x\nflatten\nlinear 10\n", "t.model:2:17:", "not 'x'"},
    {"input 1 28 28\nconv2d 8 kernel=3 init=lecun\nflatten\nlinear 10\n", "t.model:2:24:", "not 'lecun'"},
    {"input 784\nconv2d 8 kernel=3\n", "t.model:2:1:", "previous layer gives (784)"},
    {"input 1 28 28\nlinear 10\n", "t.model:2:1:", "gives (1, 28, 28); add 'flatten'"},
    {"input 1 4 4\nconv2d 8 kernel=7\nflatten\nlinear 10\n", "t.model:2:1:", "larger than its input (1, 4, 4)"},
    {"input 1 4 4\nmaxpool 8\nflatten\nlinear 10\n", "t.model:2:1:", "window 8"},
    {"input 784\ndropout 1.5\nlinear 10\n", "t.model:2:9:", "not '1.5'"},
    {"input 784\ndropout\nlinear 10\n", "t.model:2:8:", "needs a drop probability"},
    {"input 784\nlayernorm eps=0\nlinear 10\n", "t.model:2:15:", "above 0"},
    {"input 1 2 28 28 3\nflatten\nlinear 10\n", "t.model:1:1:", "1 number (features), 2 (channels length)"},
    {"input 0\nlinear 10\n", "t.model:1:7:", "from 1 to"},
    {"linear 10\n", "t.model:1:1:", "first layer must be 'input'"},
    {"input 784\nlinear 10\ninput 3\n", "t.model:3:1:", "input may only be the first layer"},
    {"input 784\nrelu\n", "t.model:2:", "one score per class"},
    {"input 1 28 28\nconv2d 4 kernel=3\n", "t.model:2:", "ends with (4, 26, 26)"},
    {"input 784\nlinear 1\n", "t.model:2:", "at least 2 classes"},
    {"# nothing\n\n", "t.model:", "no layers"},
    {"input 784\nlinear 10 a b c d e f g h i j k l m n o p\n", "t.model:2:1:", "too many words"},
    /* transformers */
    {"input 16\nblock repeat=2\nlinear 8\nresidual\nend\nlinear 2\n", "t.model:4:1:", "adds (16)"},
    {"input 16\nlinear 16\nresidual\nlinear 2\n", "t.model:3:1:", "put it in a 'block'"},
    {"input 16\nblock repeat=2\nlinear 16\nlinear 2\n", "t.model:2:1:", "no 'end'"},
    {"input 16\nlinear 16\nend\nlinear 2\n", "t.model:3:1:", "'end' without a 'block'"},
    {"input 16\nblock repeat=0\nend\nlinear 2\n", "t.model:2:14:", "from 1 to"},
    {"input 16\nblock times=2\nend\nlinear 2\n", "t.model:2:7:", "takes only repeat=N"},
    {"input tokens 8 vocab=11\nembedding 12\nattention heads=5\nlinear 11\n", "t.model:3:1:",
     "heads=5 do not divide the width 12"},
    {"input tokens 8 vocab=11\nembedding 12\nattention\nlinear 11\n", "t.model:3:1:", "number of heads"},
    {"input tokens 8 vocab=11\nembedding 12\nposembedding positions=4\nlinear 11\n", "t.model:3:1:",
     "context of 8 positions is longer than the position table of 4"},
    {"input tokens 8\nembedding 12\nlinear 11\n", "t.model:1:1:", "vocabulary size"},
    {"input tokens 8 vocab=11\nlinear 12\nlinear 11\n", "t.model:2:1:", "cannot take token ids"},
    {"input 16\nembedding 12\nlinear 11\n", "t.model:2:1:", "takes token ids"},
    {"input 16\nattention heads=2\nlinear 11\n", "t.model:2:1:", "needs a sequence (T, C)"},
    {"input tokens 8 vocab=11\nembedding 12 name=wte\nlinear 11 tie=wtf\n", "t.model:3:15:", "tie=wtf names no layer"},
    {"input tokens 8 vocab=11\nembedding 12 name=wte\nlinear 10\nlinear 11 tie=wte\n", "t.model:4:15:",
     "its weight is 11 x 12 but this layer needs 11 x 10"},
    {"input tokens 8 vocab=11\nembedding 12 name=a_name_of_thirty_two_characters_\nlinear 11\n", "t.model:2:19:",
     "a name is 1 to 31 characters"},
    {"input 4\nblock repeat=1000\nblock repeat=1000\nrelu\nend\nend\nlinear 2\n", "t.model:",
     "more than 100000 layers once blocks are repeated"},
    {"input 4\nlinear 2 bias=false bias=true\n", "t.model:2:21:", "option 'bias' is given twice"},
    {"input 4\nlinear 8 act=softmax\nlinear 2\n", "t.model:2:14:", "act=softmax is not an activation (relu,"},
    {"input 4\nlinear 8 act=dropout\nlinear 2\n", "t.model:2:14:", "act=dropout is not an activation"},
    {"input 4\nlayernorm act=relu\nlinear 2\n", "t.model:2:11:", "unknown option 'act' for layernorm"},
    /* the loss line */
    {"input 8\nlinear 3\nloss mae\n", "t.model:3:6:", "unknown loss 'mae' (known: crossentropy, mse, l1, huber)"},
    {"input 8\nlinear 3\nloss\n", "t.model:3:1:", "loss needs a kind"},
    {"input 8\nlinear 3\nloss delta=2\n", "t.model:3:1:", "loss needs a kind"},
    {"input 8\nlinear 3\nloss mse\nloss l1\n", "t.model:4:1:", "a second loss line (the first is line 3)"},
    {"loss mse\ninput 8\nlinear 3\n", "t.model:1:1:", "no layers before it"},
    {"input 8\nloss mse\nlinear 3\n", "t.model:3:1:", "a layer after the loss line (line 2)"},
    /* batchnorm */
    {"input 2 4 4\nbatchnorm eps=0\nflatten\nlinear 2\n", "t.model:2:15:", "above 0"},
    {"input 2 4 4\nbatchnorm momentum=1.5\nflatten\nlinear 2\n", "t.model:2:20:", "1.5"},
    {"input 8\nbatchnorm 3\nlinear 2\n", "t.model:2:11:", "unexpected '3'"},
    {"input 8\nbatchnorm mom=0.1\nlinear 2\n", "t.model:2:11:", "unknown option 'mom' for batchnorm"},
    {"input tokens 8 vocab=11\nbatchnorm\nlinear 11\n", "t.model:2:1:", "batchnorm cannot take token ids"},
    {"input 8\nlinear 1\nloss crossentropy\n", "t.model:3:6:", "loss crossentropy needs at least 2 classes"},
    {"input 8\nlinear 1\n", "t.model:2:", "for regression add a line 'loss mse'"},
    {"input 8\nlinear 3\nloss mse delta=2\n", "t.model:3:10:", "delta= is an option of loss huber, not of mse"},
    {"input 8\nlinear 3\nloss huber delta=0\n", "t.model:3:18:", "above 0"},
    {"input 8\nlinear 3\nloss huber delta=x\n", "t.model:3:18:", "not 'x'"},
    {"input 8\nlinear 3\nloss huber 2\n", "t.model:3:12:", "unexpected '2'"},
    {"input 8\nlinear 3\nloss l1 reduction=sum\n", "t.model:3:9:", "unknown option 'reduction' for loss"},
    {"input 8\nblock repeat=2\nlinear 8\nloss mse\nend\n", "t.model:4:1:", "not inside a block"},
    {"input 8\nrelu\nloss mse\n", "t.model:2:", "has no parameters"},
    /* save, concat, residual NAME, groupnorm */
    {"input 2 8 8\nconv2d 4 kernel=3 pad=1\nsave a\nmaxpool 2\nconcat a\nflatten\nlinear 2\n", "t.model:5:8:",
     "concat a: the value saved at line 3 is (4, 8, 8) but this layer's input is (4, 4, 4); all but the first"},
    {"input 2 4 4\nsave a\nflatten\nconcat a\nlinear 2\n", "t.model:4:8:",
     "the value saved at line 2 is (2, 4, 4) but this layer's input is (32)"},
    {"input 8\nsave a\nconcat b\nlinear 2\n", "t.model:3:8:", "concat b: no line 'save b' before this one (saved so "
     "far: a)"},
    {"input 8\nconcat a\nsave a\nlinear 2\n", "t.model:2:8:", "concat a: 'a' is saved later, at line 3"},
    {"input 8\nblock repeat=2\nconcat a\nsave a\nend\nlinear 2\n", "t.model:3:8:", "'a' is saved later, at line 4"},
    {"input 8\nblock repeat=2\nlinear 8\nsave a\nend\nconcat a\nlinear 2\n", "t.model:6:8:",
     "concat a: 'save a' (line 4) is inside the block at line 2, which repeats, and this line is outside it"},
    {"input 8\nblock repeat=2\nblock\nsave a\nend\nlinear 8\nconcat a\nend\nconcat a\nlinear 2\n", "t.model:9:8:",
     "inside the block at line 2, which repeats"},
    {"input 8\nconcat\nlinear 2\n", "t.model:2:1:", "concat needs a name (concat enc1, after a line save enc1)"},
    {"input 8\nsave a\nconcat name=a\nlinear 2\n", "t.model:3:1:", "name= would name this layer itself"},
    {"input 8\nsave\nlinear 2\n", "t.model:2:1:", "save needs a name (save enc1)"},
    {"input 8\nsave a b\nlinear 2\n", "t.model:2:8:", "unexpected 'b'"},
    {"input 8\nsave a_name_of_thirty_two_characters_\nlinear 2\n", "t.model:2:6:", "a name is 1 to 31"},
    {"input 8\nsave a\nlinear 4\nresidual a\nlinear 2\n", "t.model:4:10:", "residual adds (8) (line 2's output) to (4)"},
    {"input 8\nlinear 4\nresidual z\nlinear 2\n", "t.model:3:10:", "residual z: no line 'save z' before this one"},
    {"input tokens 4 vocab=9\nsave a\nembedding 4\nlinear 9\n", "t.model:2:1:", "save cannot take token ids"},
    {"input 6 4 4\ngroupnorm 4\nflatten\nlinear 2\n", "t.model:2:11:", "groupnorm 4: 4 groups do not divide the 6 "
     "channels of (6, 4, 4)"},
    {"input 6 4 4\ngroupnorm\nflatten\nlinear 2\n", "t.model:2:", "the number of groups"},
    {"input 6 4 4\ngroupnorm 0\nflatten\nlinear 2\n", "t.model:2:11:", "from 1 to"},
    {"input 6 4 4\ngroupnorm 2 eps=0\nflatten\nlinear 2\n", "t.model:2:17:", "above 0"},
    /* conv1d, conv3d, dilation, 1-D and 3-D pooling */
    {"input 2 4 8 8\nconv3d 4 kernel=5\nloss mse\n", "t.model:2:1:",
     "conv3d kernel 5 is larger than its input (2, 4, 8, 8) padded by 0 on each side"},
    {"input 2 4 8 8\nconv3d 4 kernel=3 dilation=2\nloss mse\n", "t.model:2:1:",
     "conv3d kernel 3 with dilation 2 spans 5, more than its input (2, 4, 8, 8)"},
    {"input 784\nconv1d 4 kernel=3\nloss mse\n", "t.model:2:1:",
     "conv1d needs a (channels, length) input but the previous layer gives (784) (a flat input"},
    {"input 1 28 28\nconv3d 4\nloss mse\n", "t.model:2:1:",
     "conv3d needs a (channels, depth, height, width) input but the previous layer gives (1, 28, 28)"},
    {"input 2 16\nconv3d 4\nloss mse\n", "t.model:2:1:", "conv3d needs a (channels, depth, height, width)"},
    {"input 2 4 8 8\nconv1d 4\nloss mse\n", "t.model:2:1:", "conv1d needs a (channels, length) input"},
    {"input 2 16\nconv1d 4 dilation=0\nloss mse\n", "t.model:2:19:", "from 1 to 64"},
    {"input 2 16\nconv1d 4 dilatoin=2\nloss mse\n", "t.model:2:10:", "unknown option 'dilatoin' for conv1d"},
    {"input 2 16\nconv1d\nloss mse\n", "t.model:2:7:", "conv1d needs the number of output channels"},
    {"input 1 9 9\nconv2d 4 kernel=3 dilation=5\nloss mse\n", "t.model:2:1:",
     "conv2d window 3 with dilation 5 spans 11, more than its input (1, 9, 9)"},
    {"input 2 16\nmaxpool3d 2\nloss mse\n", "t.model:2:1:", "maxpool3d needs a (channels, depth, height, width)"},
    {"input 2 3 3 3\navgpool3d 4\nloss mse\n", "t.model:2:1:", "avgpool3d kernel 4 is larger than its input"},
    {"input 2 5\nmaxpool1d 6\nloss mse\n", "t.model:2:1:", "maxpool1d kernel 6 is larger than its input (2, 5)"},
    {"input 2 4 4 4\nmaxpool1d 2\nloss mse\n", "t.model:2:1:", "maxpool1d needs a (channels, length) input"},
    {"input 2 4 4 4\nconv3d 4 act=softmax\nloss mse\n", "t.model:2:14:", "act=softmax is not an activation"},
    /* upsample and the transposed convolutions */
    {"input 4 8 8\nupsample scale=0\n", "t.model:2:16:", "scale must be from 1 to 64, not 0"},
    {"input 4 8 8\nupsample\n", "t.model:2:1:", "upsample needs scale=S"},
    {"input 4 8 8\nupsample scale=2 mode=cubic\n", "t.model:2:23:", "mode must be nearest or linear, not 'cubic'"},
    {"input 64\nupsample scale=2\nlinear 2\n", "t.model:2:1:", "upsample needs a (channels, length), "
     "(channels, height, width) or (channels, depth, height, width) input but the previous layer gives (64)"},
    {"input 4 8 8\nconvtranspose2d 4 kernel=2 stride=2 output_pad=2\n", "t.model:2:48:",
     "output_pad=2 must be smaller than stride=2"},
    {"input 4 8 8\nconvtranspose2d 4 kernel=3 output_pad=1\n", "t.model:2:39:",
     "output_pad=1 must be smaller than stride=1"},
    {"input 4 8 8\nconvtranspose2d 4\n", "t.model:2:1:", "convtranspose2d needs kernel=K"},
    {"input 4 8 8\nconvtranspose2d kernel=2\n", "t.model:2:25:", "needs the number of output channels"},
    {"input 4 8 8\nconvtranspose2d 4 kernel=2 strde=2\n", "t.model:2:28:", "unknown option 'strde'"},
    {"input 64\nconvtranspose1d 4 kernel=2\nlinear 2\n", "t.model:2:1:",
     "convtranspose1d needs a (channels, length) input but the previous layer gives (64)"},
    {"input 4 8\nconvtranspose2d 4 kernel=2\n", "t.model:2:1:",
     "convtranspose2d needs a (channels, height, width) input but the previous layer gives (4, 8)"},
    {"input 4 8 8\nconvtranspose3d 4 kernel=2\n", "t.model:2:1:",
     "convtranspose3d needs a (channels, depth, height, width) input"},
    {"input 4 3 3\nconvtranspose2d 4 kernel=1 pad=2\n", "t.model:2:1:",
     "kernel=1 stride=1 pad=2 leaves no output of its input (4, 3, 3)"},
};

/* upsample and convtranspose1d/2d/3d: the shapes they give, their
 * parameters (weight (in, out, k...) as PyTorch's), their descriptions
 * and the transposed convolutions' forward FLOPs. */
START_TEST(upsample_and_convtranspose_parse) {
  clt_model *m;
  const char *text = "input 4 9 10\n"
                     "convtranspose2d 6 kernel=2 stride=2\n"
                     "relu\n"
                     "upsample scale=3 mode=linear\n"
                     "convtranspose2d 2 kernel=3 stride=2 pad=1 output_pad=1 bias=false\n"
                     "upsample scale=2\n"
                     "globalavgpool\n"
                     "linear 3\n";
  ck_assert_msg(clt_model_parse(text, "t.model", &m) == 0, "%s", clt_last_error());
  char *summary;
  ck_assert_int_eq(clt_model_summary(m, &summary), 0);
  /* (9 - 1) 2 + 2 = 18; (54 - 1) 2 - 2 + 3 + 1 = 108 */
  const char *want[] = {"(6, 18, 20)", "(6, 54, 60)", "(2, 108, 120)", "(2, 216, 240)",
                        "convtranspose2d 6 k2 s2 p0", "convtranspose2d 2 k3 s2 p1 op1 no-bias", "upsample x3 linear",
                        "upsample x2 nearest"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    ck_assert_msg(strstr(summary, want[i]) != NULL, "summary lacks '%s':\n%s", want[i], summary);
  free(summary);
  ck_assert_int_eq(clt_model_param_count(m), (4 * 6 * 4 + 6) + 6 * 2 * 9 + (2 * 3 + 3));
  clt_model_destroy(m);

  clt_model_spec *spec;
  const char *vol = "input 2 3 4 5\n"
                    "convtranspose3d 3 kernel=2 stride=2\n"
                    "upsample scale=2 mode=trilinear\n"
                    "convtranspose1d 2 kernel=4\n"; /* refused: a volume */
  ck_assert_int_eq(clt__spec_parse(vol, "t.model", &spec), CLT_EFORMAT);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "t.model:4:1:"));
  vol = "input 2 3 4 5\n"
        "convtranspose3d 3 kernel=2 stride=2\n"
        "upsample scale=2 mode=trilinear\n"
        "flatten\n"
        "linear 2\n";
  ck_assert_msg(clt__spec_parse(vol, "t.model", &spec) == 0, "%s", clt_last_error());
  const clt_layer_spec *ct = &spec->layers[1], *up = &spec->layers[2];
  ck_assert_int_eq(ct->param[0].ndim, 5);
  int64_t wshape[5] = {2, 3, 2, 2, 2};
  for (int d = 0; d < 5; d++) ck_assert_int_eq(ct->param[0].shape[d], wshape[d]);
  ck_assert_str_eq(ct->param[0].name, "weight");
  ck_assert_str_eq(ct->param[1].name, "bias");
  ck_assert_int_eq(up->out_shape.ndim, 4);
  int oshape[4] = {3, 12, 16, 20};
  for (int d = 0; d < 4; d++) ck_assert_int_eq(up->out_shape.dims[d], oshape[d]);
  /* every input cell (3*4*5 of them) times Cin 2, Cout 3, 8 kernel cells, 2 flops a multiply-add */
  ck_assert(fabs(clt__spec_flops(spec, 1, 2) - 2.0 * 2 * 3 * 8 * 60) < 1e-9);
  ck_assert(fabs(clt__spec_flops(spec, 2, 3)) < 1e-9);
  clt__spec_destroy(spec);

  vol = "input 3 5\n"
        "convtranspose1d 4 kernel=4 stride=2 pad=1\n"
        "upsample scale=2 mode=linear\n"
        "flatten\n"
        "linear 2\n";
  ck_assert_msg(clt__spec_parse(vol, "t.model", &spec) == 0, "%s", clt_last_error());
  ck_assert_int_eq(spec->layers[1].out_shape.dims[1], 10); /* (5 - 1) 2 - 2 + 4 */
  ck_assert_int_eq(spec->layers[2].out_shape.dims[1], 20);
  ck_assert_int_eq(spec->layers[1].param[0].shape[0], 3);
  ck_assert_int_eq(spec->layers[1].param[0].shape[1], 4);
  clt__spec_destroy(spec);
}
END_TEST


/* A U-Net's skips: nested saves read back in reverse, the channels added
 * up; a save inside a repeated block read in the same pass; save name=;
 * residual NAME; groupnorm's parameters, PyTorch's. */
START_TEST(skips_and_groupnorm_parse) {
  clt_model *m;
  const char *unet = "input 3 8 8\n"
                     "conv2d 4 kernel=3 pad=1 act=relu\n"
                     "save e1\n"
                     "maxpool 2\n"
                     "conv2d 8 kernel=3 pad=1\n"
                     "save name=e2\n"
                     "conv2d 8 kernel=3 pad=1\n"
                     "concat e2\n"            /* (16, 4, 4) */
                     "groupnorm 4 eps=1e-6\n"
                     "conv2d 4 kernel=3 pad=3\n" /* back to 8 x 8 */
                     "concat e1\n"            /* (8, 8, 8) */
                     "block repeat=2\n"
                     "  save x\n"
                     "  conv2d 8 kernel=1\n"
                     "  residual x\n"
                     "  concat x\n"
                     "  conv2d 8 kernel=1\n"
                     "end\n"
                     "flatten\n"
                     "linear 2\n";
  ck_assert_msg(clt_model_parse(unet, "u.model", &m) == 0, "%s", clt_last_error());
  char *summary;
  clt_model_summary(m, &summary);
  ck_assert_ptr_nonnull(strstr(summary, "(16, 4, 4)"));
  ck_assert_ptr_nonnull(strstr(summary, "concat e1"));
  ck_assert_ptr_nonnull(strstr(summary, "groupnorm 4"));
  free(summary);
  const clt_model_spec *s = m->spec;
  int concats = 0;
  for (int i = 0; i < s->nlayers; i++) {
    const clt_layer_spec *l = &s->layers[i];
    if (strcmp(clt__layer_kind_name(l), "concat") == 0) {
      ck_assert_int_ge(l->skip, 0);
      ck_assert_str_eq(clt__layer_kind_name(&s->layers[l->skip]), "save");
      ck_assert_str_eq(s->layers[l->skip].skip_name, l->skip_name);
      if (i >= 15) ck_assert_int_eq(l->skip, i - 3); /* the block's concat reads its own pass's save */
      concats++;
    }
    if (strcmp(clt__layer_kind_name(l), "groupnorm") == 0) {
      ck_assert_int_eq(l->nparams, 2);
      ck_assert_str_eq(l->param[0].name, "weight");
      ck_assert_str_eq(l->param[1].name, "bias");
      ck_assert_int_eq(l->param[0].count, 16);
      ck_assert(fabs(l->eps - 1e-6) < 1e-12);
    }
  }
  ck_assert_int_eq(concats, 4);
  ck_assert_int_eq(s->skip_slots, 2); /* x twice in a pass; e1 and e2 */
  clt_model_destroy(m);
}
END_TEST

START_TEST(mistakes_are_located) {
  clt_model *m = (clt_model *)1;
  int i = _i;
  ck_assert_int_eq(clt_model_parse(bad[i].text, "t.model", &m), CLT_EFORMAT);
  ck_assert_ptr_null(m);
  const char *msg = clt_last_error();
  ck_assert_msg(strncmp(msg, bad[i].where, strlen(bad[i].where)) == 0, "case %d: '%s' does not start with '%s'", i,
                msg, bad[i].where);
  ck_assert_msg(strstr(msg, bad[i].what) != NULL, "case %d: '%s' lacks '%s'", i, msg, bad[i].what);
}
END_TEST

START_TEST(file_errors) {
  clt_model *m;
  ck_assert_int_eq(clt_model_load("/nonexistent/x.model", &m), CLT_ENOTFOUND);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "/nonexistent/x.model"));
  char path[] = "/tmp/clt-spec-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  FILE *f = fdopen(fd, "wb");
  fwrite("input 784\n\0linear 10\n", 1, 21, f);
  fclose(f);
  ck_assert_int_eq(clt_model_load(path, &m), CLT_EFORMAT);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "NUL"));
  remove(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("spec");
  TCase *tc = tcase_create("spec");
  tcase_add_test(tc, example_models_parse);
  tcase_add_test(tc, options_comments_and_shapes);
  tcase_add_test(tc, gpt_models_parse);
  tcase_add_test(tc, loss_lines_parse);
  tcase_add_test(tc, skips_and_groupnorm_parse);
  tcase_add_loop_test(tc, mistakes_are_located, 0, sizeof bad / sizeof bad[0]);
  tcase_add_test(tc, file_errors);
  tcase_add_test(tc, upsample_and_convtranspose_parse);
  tcase_add_test(tc, volume_layers_parse);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
