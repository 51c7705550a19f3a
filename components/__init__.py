"""Kubeflow components: one containerised Python component per pipeline step.

Every component runs in the project image (shdh.kfp.components.image.IMAGE) and its body is a
few lines that call the same shdh library function as the matching DVC stage (shdh.commands.*),
so both front doors run the same code. Settings arrive as the params.yaml section of the step,
passed as a JSON string (see shdh.kubeflow.pipeline_arguments for why not a dict).

    prepare -> tree -> smatrix -> start -> train@METHOD-BITS (deep)
                      features ---------> baseline@METHOD-BITS (shallow)
                                          -> evaluate -> report

The pipeline makes one task per planned fit when it is built (shdh.kfp.pipelines.shdh_pipeline), so
evaluate is made per plan too: shdh.kfp.components.evaluate.evaluate_for.
"""
